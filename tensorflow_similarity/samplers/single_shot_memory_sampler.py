"""`SingleShotMemorySampler`: batches of distinct examples, each its own class, augmented."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.samplers._inputs import as_indexable
from tensorflow_similarity.samplers.sampler import Augmenter, Sampler


class SingleShotMemorySampler(Sampler):
    """Batches of `examples_per_batch` distinct examples, each its own class, augmented.

    For data with one example per class, or none labelled: example `i` of `x`
    is class `i` (labels are `int32` indices), so the positives of a class can
    only come from augmentation. Each batch draws `examples_per_batch`
    distinct examples (0.17 drew them with replacement, so a batch could hold
    a class twice) and returns `augmenter(x, y, num_augmentations_per_example,
    is_warmup)`: the augmenter decides what the batch holds, typically
    `num_augmentations_per_example` views of each example with its label
    repeated, for `examples_per_batch * num_augmentations_per_example` rows.

    Under a `tf.distribute` strategy a batch is the global batch that `fit`
    splits over the replicas, so a loss mining the global batch pairs each
    view with the other views of its example wherever they landed (see
    `Sampler`, which also describes seeding and warm-up).

    Args:
        x: The examples, one per row: a NumPy array, a `tf.Tensor` or a
            sequence of equally shaped examples.
        augmenter: A callable `(x, y, num_augmentations_per_example,
            is_warmup) -> (x, y)` that makes the views of each batch.
        examples_per_batch: Number of distinct examples (classes) per batch.
        num_augmentations_per_example: Passed to the augmenter: the number of
            views to make of each example. Defaults to 2.
        steps_per_epoch: Number of batches per epoch. Defaults to 1000.
        warmup: Number of epochs during which the augmenter gets
            `is_warmup=True`. Defaults to -1: none.
        seed: Non-negative integer seed of the batches (keyword only).
            Defaults to `None`: a random one.
        **kwargs: `keras.utils.PyDataset` options: `workers`,
            `use_multiprocessing`, `max_queue_size`.

    Raises:
        ValueError: If `examples_per_batch` exceeds the number of examples, or
            a count is not a positive integer.
        TypeError: If `augmenter` is not callable.

    Example:

    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.samplers import SingleShotMemorySampler
    >>> def two_views(x, y, n, is_warmup):
    ...     return tf.concat([x] * n, 0), tf.concat([y] * n, 0)
    >>> sampler = SingleShotMemorySampler(np.eye(6), two_views, 4, seed=0)
    >>> xb, yb = sampler[0]
    >>> xb.shape
    TensorShape([8, 6])
    """

    def __init__(
        self,
        x: Any,
        augmenter: Augmenter,
        examples_per_batch: int,
        num_augmentations_per_example: int = 2,
        steps_per_epoch: int = 1000,
        warmup: int = -1,
        *,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        owner = type(self).__name__
        if not callable(augmenter):
            raise TypeError(
                f"{owner}: augmenter must be a callable (x, y, num_augmentations_per_example, "
                "is_warmup) -> (x, y): with one example per class, the augmenter makes the "
                f"positives. Received {augmenter!r}."
            )
        check_int("examples_per_batch", examples_per_batch, minimum=1, owner=owner)
        examples = as_indexable(x, owner=owner)
        if examples_per_batch > len(examples):
            raise ValueError(
                f"{owner}: examples_per_batch={examples_per_batch} exceeds the {len(examples)} "
                "examples of x; a batch holds distinct examples. Lower examples_per_batch."
            )
        super().__init__(
            examples_per_batch,
            examples_per_class_per_batch=1,
            num_augmentations_per_example=num_augmentations_per_example,
            steps_per_epoch=steps_per_epoch,
            augmenter=augmenter,
            warmup=warmup,
            seed=seed,
            **kwargs,
        )
        self._x = examples
        self._y = np.arange(len(examples), dtype=np.int32)

    def _get_examples(
        self, batch_id: int, num_classes: int, examples_per_class: int
    ) -> tuple[tf.Tensor, tf.Tensor]:
        indices = self.batch_rng(batch_id).choice(self.num_examples, num_classes, replace=False)
        return tf.convert_to_tensor(self._x[indices]), tf.convert_to_tensor(self._y[indices])

    def get_slice(self, begin: int = 0, size: int = -1) -> tuple[Any, Any]:
        """Returns the augmented examples `begin` to `begin + size` and their labels.

        Args:
            begin: Index of the first example. Defaults to 0.
            size: Number of examples; -1 means up to the end of `x`. Defaults to -1.

        Returns:
            The augmenter's `(x, y)` for those examples.

        Raises:
            ValueError: If `begin` is not in `[0, num_examples)` or `size` is
                neither -1 nor a non-negative integer.
        """
        end = self.slice_end(begin, size, self.num_examples)
        x = tf.convert_to_tensor(self._x[begin:end])
        y = tf.convert_to_tensor(self._y[begin:end])
        return self.augmenter(x, y, self.num_augmentations_per_example, self.is_warmup)

    @property
    def num_examples(self) -> int:
        """Number of examples (and classes) in `x`."""
        return len(self._x)

    @property
    def example_shape(self) -> Any:
        """Shape of one example."""
        return self._x[0].shape
