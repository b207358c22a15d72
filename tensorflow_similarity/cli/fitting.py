"""What both `tfsim train` jobs share to train: their input pipeline's settings and the fit call."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import keras
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
