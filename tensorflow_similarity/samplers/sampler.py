"""`Sampler`: the base of the batch samplers, a Keras 3 `PyDataset` of balanced batches."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from tensorflow_similarity._validation import check_int

# `augmenter(x, y, num_augmentations_per_example, is_warmup) -> (x, y)`, as in 0.17.
Augmenter = Callable[[Any, Any, int, bool], tuple[Any, Any]]


def check_sampler_args(
    owner: str,
    *,
    classes_per_batch: Any,
    examples_per_class_per_batch: Any,
    num_augmentations_per_example: Any = 1,
    steps_per_epoch: Any,
    augmenter: Any,
    warmup: Any,
    seed: Any,
) -> None:
    """Checks the arguments every sampler shares; subclasses call it before loading data.

    Raises:
        ValueError: If a count is not a positive integer, `warmup` is not an
            integer or `seed` is not a non-negative integer or `None`.
        TypeError: If `augmenter` is neither `None` nor callable.
    """
    check_int("classes_per_batch", classes_per_batch, minimum=1, owner=owner)
    check_int("examples_per_class_per_batch", examples_per_class_per_batch, minimum=1, owner=owner)
    check_int(
        "num_augmentations_per_example", num_augmentations_per_example, minimum=1, owner=owner
    )
    check_int("steps_per_epoch", steps_per_epoch, minimum=1, owner=owner)
    check_int("warmup", warmup, owner=owner, hint="It counts epochs; 0 or less means none.")
    check_int("seed", seed, minimum=0, allow_none=True, owner=owner)
    if augmenter is not None and not callable(augmenter):
        raise TypeError(
            f"{owner}: augmenter must be None or a callable "
            "(x, y, num_augmentations_per_example, is_warmup) -> (x, y). "
            f"Received {augmenter!r} of type {type(augmenter).__name__}."
        )


class Sampler(keras.utils.PyDataset, abc.ABC):
    """Base of the samplers: a `PyDataset` whose batches hold few classes, several examples each.

    Metric losses need positives in every batch, so a sampler builds each batch
    from `classes_per_batch` classes with `examples_per_class_per_batch`
    examples of each: `batch_size = classes_per_batch *
    examples_per_class_per_batch` before augmentation. `sampler[i]` returns
    the batch `(x, y)`, `len(sampler)` is `steps_per_epoch`, and
    `model.fit(sampler, epochs=...)` trains on it. A subclass implements
    `_get_examples(batch_id, num_classes, examples_per_class)`, which draws the
    examples; this base applies the augmenter and counts epochs.

    Augmenter and warm-up: when an `augmenter` is given, each batch is
    returned as `augmenter(x, y, num_augmentations_per_example, is_warmup)`,
    which may change the number of examples. `is_warmup` is `True` during the
    first `warmup` epochs (`sampler.epoch < warmup`) and `False` afterwards.
    A `warmup` of 0 or less means no warm-up epoch. (0.17 also flagged the
    first epoch as warm-up when `warmup=-1`, its default; here -1 means none.)
    `on_epoch_end` advances `sampler.epoch`: `fit` calls it after each epoch,
    and a custom training loop calls it likewise, as with 0.17. (Keras 3's
    `fit` also calls it once before its first epoch; that call, recognised by
    the `on_epoch_begin` that follows it, does not count.)

    Seeding: batch `i` of epoch `e` is drawn from a NumPy generator seeded with
    `(seed, e, i)`, so it does not depend on the order in which batches are
    requested (Keras peeks at the first batches, shuffles their order and may
    fetch them from several threads) and two samplers built with the same
    `seed` give the same batches, epoch after epoch. A different seed or epoch
    gives different batches. `seed=None` draws a random seed at construction.
    `batch_rng(batch_id)` returns that generator for subclasses.

    Distributed training: under a `tf.distribute` strategy, `fit` splits each
    sampler batch over the replicas, so one sampler batch is the global batch:
    choose `classes_per_batch * examples_per_class_per_batch` as the global
    batch size. A metric loss that mines the global batch (the losses of
    `tensorflow_similarity.losses`) then sees every class of the batch with all
    its examples, whichever replica they landed on. Examples are grouped by
    class in the batch, so a replica receives whole classes when
    `classes_per_batch` is a multiple of the number of replicas.

    Args:
        classes_per_batch: Number of distinct classes in a batch.
        examples_per_class_per_batch: Number of examples of each class in a
            batch. Defaults to 2.
        num_augmentations_per_example: Passed to the augmenter: how many
            augmented versions of each example it should return. Defaults to 1.
        steps_per_epoch: Number of batches per epoch, `len(sampler)`. Defaults
            to 1000.
        augmenter: `None` or a callable `(x, y, num_augmentations_per_example,
            is_warmup) -> (x, y)` applied to every batch. Defaults to `None`.
        warmup: Number of epochs during which the augmenter gets
            `is_warmup=True`. Defaults to 0.
        seed: Non-negative integer seed of the batches (keyword only).
            Defaults to `None`: a random one.
        **kwargs: `keras.utils.PyDataset` options: `workers`,
            `use_multiprocessing`, `max_queue_size`.

    Raises:
        ValueError: If a count is not a positive integer, `warmup` is not an
            integer or `seed` is not a non-negative integer or `None`.
        TypeError: If `augmenter` is neither `None` nor callable.
    """

    def __init__(
        self,
        classes_per_batch: int,
        examples_per_class_per_batch: int = 2,
        num_augmentations_per_example: int = 1,
        steps_per_epoch: int = 1000,
        augmenter: Augmenter | None = None,
        warmup: int = 0,
        *,
        seed: int | None = None,
        **kwargs: Any,
    ) -> None:
        check_sampler_args(
            type(self).__name__,
            classes_per_batch=classes_per_batch,
            examples_per_class_per_batch=examples_per_class_per_batch,
            num_augmentations_per_example=num_augmentations_per_example,
            steps_per_epoch=steps_per_epoch,
            augmenter=augmenter,
            warmup=warmup,
            seed=seed,
        )
        super().__init__(**kwargs)
        self.epoch = 0
        # Epoch bookkeeping under Keras' begin/end calls; see `on_epoch_end`.
        self._in_epoch = False
        self._saw_begin = False
        self._unmatched_end = False
        self.classes_per_batch = int(classes_per_batch)
        self.examples_per_class_per_batch = int(examples_per_class_per_batch)
        self.num_augmentations_per_example = int(num_augmentations_per_example)
        self.batch_size = self.classes_per_batch * self.examples_per_class_per_batch
        self.steps_per_epoch = int(steps_per_epoch)
        self.augmenter = augmenter
        self.warmup = int(warmup)
        self.seed = seed
        self._entropy = int(seed) if seed is not None else np.random.SeedSequence().entropy

    @property
    def is_warmup(self) -> bool:
        """Whether the current epoch is a warm-up epoch (`epoch < warmup`)."""
        return self.epoch < self.warmup

    @abc.abstractmethod
    def _get_examples(self, batch_id: int, num_classes: int, examples_per_class: int) -> tuple:
        """Draws the examples of batch `batch_id`, before augmentation.

        Args:
            batch_id: Index of the batch in the epoch; `batch_rng(batch_id)` is
                its source of randomness.
            num_classes: Number of distinct classes to draw.
            examples_per_class: Number of examples of each class.

        Returns:
            `(x, y)`, `num_classes * examples_per_class` examples and their labels.
        """

    def batch_rng(self, batch_id: int) -> np.random.Generator:
        """Returns the generator batch `batch_id` of the current epoch is drawn from."""
        return np.random.default_rng([self._entropy, self.epoch, batch_id])

    def generate_batch(self, batch_id: int) -> tuple:
        """Returns batch `batch_id` of the current epoch, augmented when an augmenter is set.

        Args:
            batch_id: Non-negative index of the batch.

        Returns:
            `(x, y)`.

        Raises:
            ValueError: If `batch_id` is not a non-negative integer.
        """
        check_int("batch_id", batch_id, minimum=0, owner=type(self).__name__)
        x, y = self._get_examples(
            int(batch_id), self.classes_per_batch, self.examples_per_class_per_batch
        )
        if self.augmenter is not None:
            x, y = self.augmenter(x, y, self.num_augmentations_per_example, self.is_warmup)
        return x, y

    def __getitem__(self, batch_id: int) -> tuple:
        return self.generate_batch(batch_id)

    def __len__(self) -> int:
        return self.steps_per_epoch

    def on_epoch_begin(self) -> None:
        """Marks the start of an epoch; `fit` calls it."""
        super().on_epoch_begin()
        if not self._saw_begin and self._unmatched_end:
            # Keras 3's fit calls on_epoch_end once before its first epoch
            # begins: that call ended no epoch.
            self.epoch -= 1
        self._saw_begin = True
        self._unmatched_end = False
        self._in_epoch = True

    def on_epoch_end(self) -> None:
        """Advances `epoch`, which ends the warm-up after `warmup` epochs.

        Once `fit` has driven the sampler (called `on_epoch_begin`), only an
        `on_epoch_end` that closes a begun epoch advances it, so the extra call
        each `fit` makes before its first epoch is ignored.
        """
        super().on_epoch_end()
        if self._in_epoch or not self._saw_begin:
            self.epoch += 1
            self._unmatched_end = not self._in_epoch
        self._in_epoch = False
