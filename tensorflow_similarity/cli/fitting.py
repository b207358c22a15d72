"""What both `tfsim train` jobs share: input settings, backup, the fit call, queries, inference."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity import augmenters
from tensorflow_similarity.callbacks.stop_on_non_finite import StopOnNonFinite
from tensorflow_similarity.cli.defaults import LARS_EXCLUSIONS, LARS_REFERENCE_BATCH
from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.optimizers import LARS, scaled_learning_rate
from tensorflow_similarity.optimizers.lars import BIAS_AND_NORM
from tensorflow_similarity.schedules import WarmupCosineDecay


def parallel_batches(
    dataset: tf.data.Dataset, make_batch: Callable[..., Any], deterministic: bool
) -> tf.data.Dataset:
    """Returns `dataset.map(make_batch)`, parallel and prefetched, with tf.data autotuning off.

    Autotuning runs a background thread that the iterator's destructor waits
    for (`RootDataset::Iterator`'s destructor waits while the thread sleeps
    out its period, up to a minute), so with it on a run can sit idle when
    `fit` returns. Fixed settings instead: one map call per core, two batches
    prefetched. The per-replica iterators that
    `fit` builds under `MirroredStrategy` would turn it on again (see
    `replica_batches`).

    Args:
        dataset: The per-batch inputs (step numbers, index rows).
        make_batch: Builds one batch from an element of `dataset`.
        deterministic: Whether `tf.data` keeps the batches in order.

    Returns:
        The `tf.data.Dataset` of batches.
    """
    options = tf.data.Options()
    options.deterministic = deterministic
    options.autotune.enabled = False
    return (
        dataset.map(make_batch, num_parallel_calls=os.cpu_count() or 1)
        .prefetch(2)
        .with_options(options)
    )


def replica_batches(
    dataset: tf.data.Dataset, strategy: tf.distribute.Strategy
) -> tf.data.Dataset | tf.distribute.DistributedDataset:
    """Returns `dataset`'s global batches split over `strategy`'s replicas as `fit` would.

    Under `MirroredStrategy`, `fit` would split the batches itself, through
    per-replica iterators whose tf.data autotuning thread their destructors
    wait for (`RootDataset::Iterator`'s destructor waits while
    `Model::OptimizeLoop` sleeps out its period, up to a minute), so a run
    can sit idle when `fit` returns.
    Here each replica reads its own slice of every global batch (rows
    `[r * b, (r + 1) * b)` of replica `r` with `b` images per replica, the
    split `fit` makes) from an iterator of `dataset` itself, which keeps its
    options (autotuning off) and stays on the host: each step copies its
    batch to the replica's device. Each replica builds every global batch,
    so the input work is repeated once per replica; on logical CPUs this is
    still faster than `fit`'s own split, with the same results. Other strategies, one
    replica, or a batch size the replicas do not divide get `dataset`
    unchanged.

    Args:
        dataset: Global batches, every component with the same static size.
        strategy: The strategy `fit` runs under.

    Returns:
        A dataset to pass to `fit`.
    """
    replicas = strategy.num_replicas_in_sync
    if not isinstance(strategy, tf.distribute.MirroredStrategy) or replicas == 1:
        return dataset
    sizes = {spec.shape[0] for spec in tf.nest.flatten(dataset.element_spec)}
    if len(sizes) != 1 or None in sizes or next(iter(sizes)) % replicas:
        return dataset
    size = sizes.pop() // replicas

    def replica_dataset(context: tf.distribute.InputContext) -> tf.data.Dataset:
        start = context.input_pipeline_id * size
        return dataset.map(
            lambda *batch: tf.nest.map_structure(
                lambda part: part[start : start + size], batch if len(batch) > 1 else batch[0]
            )
        )

    return strategy.distribute_datasets_from_function(
        replica_dataset,
        tf.distribute.InputOptions(
            experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
            experimental_fetch_to_device=False,
        ),
    )


def pixel_vectors(images: np.ndarray) -> np.ndarray:
    """The images' pixels as flat vectors: the embedding of no network at all.

    Both jobs score it beside the network, as the reference training should beat.
    """
    return images.reshape(len(images), -1)


def make_optimizer(
    name: str,
    learning_rate: float | keras.optimizers.schedules.LearningRateSchedule,
    lars_exclude: str | None = None,
) -> keras.optimizers.Optimizer:
    """The `--optimizer` of a run: SGD (momentum 0.9, weight decay 5e-4), Adam or LARS.

    LARS has SimCLR's settings (Chen et al., 2020): momentum 0.9, weight decay
    1e-6, trust coefficient 0.001, and by default batch norm parameters and
    biases excluded (`lars_exclusion` of `--lars-exclude`).
    """
    if name == "adam":
        return keras.optimizers.Adam(learning_rate)
    if name == "lars":
        exclude = lars_exclusion(lars_exclude)
        return LARS(learning_rate, momentum=0.9, weight_decay=1e-6, eta=0.001, exclude=exclude)
    return keras.optimizers.SGD(learning_rate, momentum=0.9, weight_decay=5e-4)


def resolved_learning_rate(args: argparse.Namespace) -> float:
    """The peak learning rate of a run.

    `--learning-rate` itself, except with `--optimizer lars`, where it is the
    rate at a batch of `LARS_REFERENCE_BATCH`, scaled linearly to the global
    `--batch-size` (`optimizers.scaled_learning_rate`).
    """
    if args.optimizer == "lars":
        return scaled_learning_rate(
            args.learning_rate, args.batch_size, reference_batch_size=LARS_REFERENCE_BATCH
        )
    return args.learning_rate


def learning_rate_text(args: argparse.Namespace) -> str:
    """How the set-up line states the optimizer and its resolved learning rate."""
    text = f"{args.optimizer} at learning rate {resolved_learning_rate(args):g}"
    if args.optimizer == "lars":
        text += (
            f" (--learning-rate {args.learning_rate:g} x batch {args.batch_size} / "
            f"{LARS_REFERENCE_BATCH})"
        )
    return text


def scheduled_optimizer(
    args: argparse.Namespace, steps_per_epoch: int
) -> keras.optimizers.Optimizer:
    """The run's `--optimizer` at its resolved learning rate, decayed to 0 (cosine) over the run.

    LARS first warms up linearly from 0 over the first tenth of the steps, as
    the large-batch recipe does.
    """
    steps = max(args.epochs * steps_per_epoch, 1)
    peak = resolved_learning_rate(args)
    if args.optimizer == "lars":
        schedule = WarmupCosineDecay(peak, total_steps=steps, warmup_steps=steps // 10)
    else:
        schedule = keras.optimizers.schedules.CosineDecay(peak, decay_steps=steps)
    return make_optimizer(args.optimizer, schedule, getattr(args, "lars_exclude", None))


def lars_exclusion(kinds: str | None) -> Any:
    """LARS' `exclude` for a `--lars-exclude` value (checked by `cli.options`).

    `None` or `"bias,norm"`: LARS' own rule (`optimizers.is_bias_or_norm`);
    `"none"`: nothing; else the substrings of the kinds named (`LARS_EXCLUSIONS`).
    """
    names = sorted(set((kinds or "bias,norm").split(",")))
    if names == ["bias", "norm"]:
        return BIAS_AND_NORM  # LARS' default rule, which a saved model keeps by name.
    if names == ["none"]:
        return []
    return [part for name in names for part in LARS_EXCLUSIONS[name]]


def sync_bn_policy(args: argparse.Namespace) -> bool | GroupSyncBatchNorm:
    """The builders' `sync_bn` of a run: `--sync-bn`, in groups of `--sync-group-size` if given."""
    if not args.sync_bn:
        return False
    return GroupSyncBatchNorm(args.sync_group_size) if args.sync_group_size else True


def fit_epochs(
    model: keras.Model,
    dataset: tf.data.Dataset,
    args: argparse.Namespace,
    first_epoch: int,
    steps_per_epoch: int,
    callbacks: Sequence[keras.callbacks.Callback],
    chief: bool,
) -> None:
    """Trains `model` from epoch `first_epoch` to `args.epochs`, if any is left.

    The batches come in their seeded order (no shuffle), so a resumed run
    sees the uninterrupted run's, split over the replicas by
    `replica_batches`; the chief prints progress (a bar on a terminal, one
    line per epoch otherwise), the other workers nothing. `StopOnNonFinite`
    runs before `callbacks`.

    Raises:
        TrainingDiverged: At the first non-finite loss or weight.
    """
    if first_epoch >= args.epochs:
        return
    model.fit(
        replica_batches(dataset, model.distribute_strategy),
        epochs=args.epochs,
        initial_epoch=first_epoch,
        steps_per_epoch=steps_per_epoch,
        callbacks=[StopOnNonFinite(steps_per_epoch, args.learning_rate, advice=False), *callbacks],
        verbose=(1 if sys.stdout.isatty() else 2) if chief else 0,
        shuffle=False,
    )


def width_argument(args: argparse.Namespace) -> dict[str, float]:
    """The backbone builder's `width` keyword for `--width` (resnet18's; none for the others).

    A run.json written before `--width` existed has none: the full width.
    """
    width = getattr(args, "width", None)
    return {} if width in (None, 1.0) else {"width": width}


class EvaluationSchedule(keras.callbacks.Callback):
    """Runs callbacks' `on_epoch_end` after every `every` epochs and after the last.

    Holds `BatchNormStatistics` and the evaluations of a run (`--eval-every`):
    an epoch left out gets no figures in its logs. Skipping the statistics
    changes nothing that training reads (batch norm trains on batch
    statistics) and they are recomputed after the last epoch, so the final
    model and figures do not depend on `every`.

    Args:
        callbacks: The callbacks to run, in order.
        every: Evaluate after epochs `every`, `2 * every`, ... (counted from 1).
        epochs: The run's number of epochs (the last is always evaluated).
    """

    def __init__(self, callbacks: list[keras.callbacks.Callback], every: int, epochs: int) -> None:
        super().__init__()
        self.callbacks = list(callbacks)
        self.every = every
        self.epochs = epochs

    def set_model(self, model: keras.Model) -> None:
        super().set_model(model)
        for callback in self.callbacks:
            callback.set_model(model)

    def set_params(self, params: dict[str, Any]) -> None:
        super().set_params(params)
        for callback in self.callbacks:
            callback.set_params(params)

    def scheduled(self, epoch: int) -> bool:
        """Whether the epoch of index `epoch` (from 0) is evaluated."""
        return (epoch + 1) % self.every == 0 or epoch + 1 == self.epochs

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.scheduled(epoch):
            for callback in self.callbacks:
                callback.on_epoch_end(epoch, logs)


def augmented_queries(images: np.ndarray, augmenter: augmenters.ViewAugmenter) -> np.ndarray:
    """Returns the first view of each image under `augmenter`, the same in every call.

    Scored against the clean training images, these queries measure
    invariance to the run's own augmentations, what the self-supervised
    objective (and a supervised run's augmented batches) teaches; clean
    queries do not (random ResNet features are already close to the best on
    clean digits). The views are drawn with
    `step=-1`, which no training batch uses (their steps count from 0), in one
    call, so they are a pure function of the images and the augmenter's seed.

    Args:
        images: `[count, height, width, channels]` images.
        augmenter: The run's augmenter.

    Returns:
        The `[count, image_size, image_size, channels]` float32 queries.
    """
    return augmenter(tf.constant(images), step=-1)[0].numpy()


def inference_function(model: keras.Model) -> Callable[[np.ndarray], np.ndarray]:
    """Returns a function that runs `model` in inference mode on images, 1,024 at a time.

    One traced call per chunk, not `model.predict`: predict builds a distributed
    dataset at every call, which costs more than the traced call on the small
    sets the jobs evaluate, and under `MultiWorkerMirroredStrategy` it returns
    each worker its own shard only.

    Args:
        model: A model with one image input.

    Returns:
        A function from `[n, height, width, channels]` float32 images to the
        model's `[n, ...]` NumPy output.
    """
    shape = tuple(model.inputs[0].shape[1:])
    step = tf.function(
        lambda images: model(images, training=False),
        input_signature=[tf.TensorSpec((None, *shape), tf.float32)],
    )

    def run(images: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [np.asarray(step(images[i : i + 1024])) for i in range(0, len(images), 1024)]
        )

    return run
