"""`MultiShotMemorySampler`: class-balanced batches drawn from examples held in memory."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_int
from tensorflow_similarity.samplers._inputs import (
    as_indexable,
    check_class_list,
    check_same_length,
    class_ids,
)
from tensorflow_similarity.samplers.sampler import Augmenter, Sampler
from tensorflow_similarity.samplers.select_examples import selection_indices


class MultiShotMemorySampler(Sampler):
    """Batches of `classes_per_batch` classes with `examples_per_class_per_batch` examples each.

    For labelled data that fits in memory, with several examples per class
    (with one example per class, use `SingleShotMemorySampler`). The pool of
    examples is chosen once, at construction: the classes of `class_list`, at
    most `total_examples_per_class` examples of each (as `select_examples`
    with the same seed), in random order. Each batch then draws
    `classes_per_batch` distinct classes of the pool and, for each,
    `examples_per_class_per_batch` distinct examples, grouped by class: batch
    size `classes_per_batch * examples_per_class_per_batch`. A class with fewer
    examples than that is drawn with replacement (a warning names it, as 0.17
    did), unless `allow_replacement=False`, which makes it an error.

    Under a `tf.distribute` strategy a batch is the global batch that `fit`
    splits over the replicas, so a loss mining the global batch sees all its
    classes (see `Sampler`). Seeding, warm-up and the augmenter are as in
    `Sampler`.

    Args:
        x: The examples, one per row: a NumPy array, a `tf.Tensor` or a
            sequence (file paths, say, with a `load_example_fn`).
        y: Integer class ids, of shape `[n]` or `[n, 1]`.
        load_example_fn: `None` or a callable applied to each drawn element of
            `x` to make the example (e.g. read an image from its path); the
            results must share one shape. Defaults to `None`: the element as is
            (0.17's `lambda q: q`).
        classes_per_batch: Number of distinct classes in a batch. Defaults to 2.
        examples_per_class_per_batch: Number of examples of each class in a
            batch. Defaults to 2.
        steps_per_epoch: Number of batches per epoch. Defaults to 1000.
        class_list: The classes to sample from. Defaults to `None` (an empty
            sequence too): every class of `y`.
        total_examples_per_class: The most examples of each class in the pool.
            Defaults to `None`: all of them.
        augmenter: `None` or a callable `(x, y, num_augmentations_per_example,
            is_warmup) -> (x, y)` applied to each batch (it receives
            `num_augmentations_per_example=1`). Defaults to `None`.
        warmup: Number of epochs during which the augmenter gets
            `is_warmup=True`. Defaults to -1: none.
        seed: Non-negative integer seed of the pool and the batches (keyword
            only). Defaults to `None`: a random one.
        allow_replacement: Whether a class with fewer than
            `examples_per_class_per_batch` examples in the pool may be drawn
            with replacement (keyword only). Defaults to `True`.
        **kwargs: `keras.utils.PyDataset` options: `workers`,
            `use_multiprocessing`, `max_queue_size`.

    Attributes:
        class_list: The sorted classes batches are drawn from.
        index_per_class: For each class, the indices of its pool examples.

    Raises:
        ValueError: If `x` and `y` differ in length or are empty, `y` is not of
            shape `[n]` or `[n, 1]`, `class_list` names a class absent from
            `y`, `classes_per_batch` exceeds the number of classes, a class is
            smaller than `examples_per_class_per_batch` with
            `allow_replacement=False`, or a count is not a positive integer.
        TypeError: If `y` does not hold integers, or `load_example_fn` or
            `augmenter` is neither `None` nor callable.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.samplers import MultiShotMemorySampler
    >>> x = np.random.rand(100, 4).astype("float32")
    >>> y = np.repeat(np.arange(10), 10)
    >>> sampler = MultiShotMemorySampler(
    ...     x, y, classes_per_batch=4, examples_per_class_per_batch=3, steps_per_epoch=5, seed=0
    ... )
    >>> xb, yb = sampler[0]
    >>> xb.shape, sorted(np.unique(yb.numpy(), return_counts=True)[1].tolist())
    (TensorShape([12, 4]), [3, 3, 3, 3])
    """

    def __init__(
        self,
        x: Any,
        y: Any,
        load_example_fn: Callable[[Any], Any] | None = None,
        classes_per_batch: int = 2,
        examples_per_class_per_batch: int = 2,
        steps_per_epoch: int = 1000,
        class_list: Sequence[int] | None = None,
        total_examples_per_class: int | None = None,
        augmenter: Augmenter | None = None,
        warmup: int = -1,
        *,
        seed: int | None = None,
        allow_replacement: bool = True,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        if load_example_fn is not None and not callable(load_example_fn):
            raise TypeError(
                f"{owner}: load_example_fn must be None or a callable. Received "
                f"{load_example_fn!r}. As in 0.17, the third positional argument is "
                "load_example_fn: pass classes_per_batch and the others by keyword."
            )
        check_int(
            "total_examples_per_class",
            total_examples_per_class,
            minimum=1,
            allow_none=True,
            owner=owner,
        )
        check_bool("allow_replacement", allow_replacement, owner=owner)
        super().__init__(
            classes_per_batch,
            examples_per_class_per_batch=examples_per_class_per_batch,
            steps_per_epoch=steps_per_epoch,
            augmenter=augmenter,
            warmup=warmup,
            seed=seed,
            **kwargs,
        )
        self.load_example_fn = load_example_fn

        examples = as_indexable(x, owner=owner)
        labels = class_ids(y, owner=owner)
        check_same_length(examples, labels, owner=owner)
        requested = check_class_list(class_list, labels, owner=owner)
        self.class_list = requested if requested is not None else np.unique(labels).tolist()
        if self.classes_per_batch > len(self.class_list):
            raise ValueError(
                f"{owner}: classes_per_batch={self.classes_per_batch} exceeds the "
                f"{len(self.class_list)} classes to sample from ({self.class_list}). Lower "
                "classes_per_batch or widen class_list."
            )

        pool = selection_indices(
            labels, requested, total_examples_per_class, np.random.default_rng(self._entropy)
        )
        self._x = examples[pool]
        self._y = np.asarray(y)[pool]
        pool_labels = labels[pool]
        self.index_per_class = {c: np.flatnonzero(pool_labels == c) for c in self.class_list}

        small = {
            c: len(members)
            for c, members in self.index_per_class.items()
            if len(members) < self.examples_per_class_per_batch
        }
        if small:
            message = (
                f"{owner}: examples_per_class_per_batch={self.examples_per_class_per_batch} but "
                f"these classes have fewer examples (class: count): {small}."
            )
            if not allow_replacement:
                raise ValueError(
                    f"{message} Lower examples_per_class_per_batch, drop those classes with "
                    "class_list, or pass allow_replacement=True to repeat their examples."
                )
            warnings.warn(
                f"{message} Their examples are drawn with replacement, so a batch repeats "
                "some; an augmenter or SingleShotMemorySampler may suit them better.",
                stacklevel=2,
            )

    def _get_examples(
        self, batch_id: int, num_classes: int, examples_per_class: int
    ) -> tuple[tf.Tensor, tf.Tensor]:
        rng = self.batch_rng(batch_id)
        classes = rng.choice(self.class_list, size=num_classes, replace=False)
        indices = np.concatenate(
            [
                rng.choice(
                    self.index_per_class[c],
                    size=examples_per_class,
                    replace=len(self.index_per_class[c]) < examples_per_class,
                )
                for c in classes
            ]
        )
        return self._gather(indices)

    def _gather(self, indices: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        if self.load_example_fn is None:
            x = self._x[indices]
        else:
            x = np.asarray([self.load_example_fn(self._x[i]) for i in indices])
        return tf.convert_to_tensor(x), tf.convert_to_tensor(self._y[indices])

    def get_slice(self, begin: int = 0, size: int = -1) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns `size` consecutive examples of the pool, from index `begin`, and their labels.

        The pool is in random order (see the class docstring), so a slice is a
        random sample of it; `load_example_fn` is applied, the augmenter is not.

        Args:
            begin: Index of the first example. Defaults to 0.
            size: Number of examples; -1 means up to the end of the pool (0.17
                dropped the last example then). Defaults to -1.

        Returns:
            `(x, y)` tensors.

        Raises:
            ValueError: If `begin` is not in `[0, num_examples)` or `size` is
                neither -1 nor a non-negative integer.
        """
        end = self.slice_end(begin, size, self.num_examples)
        return self._gather(np.arange(begin, end))

    @property
    def num_examples(self) -> int:
        """Number of examples in the pool."""
        return len(self._x)

    @property
    def example_shape(self) -> Any:
        """Shape of one example (after `load_example_fn`)."""
        first = self._x[0] if self.load_example_fn is None else self.load_example_fn(self._x[0])
        return first.shape
