"""What both `tfsim train` jobs share: their input pipeline's settings, the fit call, inference."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf


def parallel_batches(
    dataset: tf.data.Dataset, make_batch: Callable[..., Any], deterministic: bool
) -> tf.data.Dataset:
    """Returns `dataset.map(make_batch)`, parallel and prefetched, with tf.data autotuning off.

    Autotuning runs a background thread that the iterator's destructor waits
    for: with it on, the default supervised run sat idle for 64 and 121 s
    when `fit` returned (two runs examined with py-spy: `RootDataset::Iterator`'s
    destructor waiting on a tf.data thread). Fixed settings instead: one map
    call per core, two batches prefetched. The per-replica iterators that
    `MirroredStrategy` builds keep tf.data's defaults (1 of 4 runs still
    waited 64 s).

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
    sees the uninterrupted run's; the chief prints progress (a bar on a
    terminal, one line per epoch otherwise), the other workers nothing.
    """
    if first_epoch >= args.epochs:
        return
    model.fit(
        dataset,
        epochs=args.epochs,
        initial_epoch=first_epoch,
        steps_per_epoch=steps_per_epoch,
        callbacks=list(callbacks),
        verbose=(1 if sys.stdout.isatty() else 2) if chief else 0,
        shuffle=False,
    )


def inference_function(model: keras.Model) -> Callable[[np.ndarray], np.ndarray]:
    """Returns a function that runs `model` in inference mode on images, 1,024 at a time.

    One traced call per chunk, not `model.predict`: predict builds a distributed
    dataset at every call (1.1 s for the 1,438 indexed digits against 0.7 s
    here; the default supervised run evaluates twice per epoch), and under
    `MultiWorkerMirroredStrategy` it returns each worker its own shard only.

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
