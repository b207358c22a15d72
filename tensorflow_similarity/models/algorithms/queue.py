"""A method's queue of keys across optimizer steps (MoCo v2's negatives, SwAV's extra rows).

The queue is a method state variable `[queue_size, dim]`, identical on every
replica: after each optimizer step it drops its oldest rows and appends the
step's keys, gathered over the replicas in the order of the step's global
batch (micro-batch by micro-batch, each in replica order). Its rows are
therefore oldest first, newest last, and `K` replicas hold the queue one
device holding the global batch holds.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import is_int
from tensorflow_similarity.models.momentum import assign_on_every_replica

__all__ = ["appended", "check_queue_fits", "check_queue_size", "enqueue", "keys_per_step"]


def check_queue_size(queue_size: Any, owner: str) -> int:
    """Returns `queue_size` if it is an int >= 1, else raises `ValueError` naming `owner`."""
    if not is_int(queue_size) or queue_size < 1:
        raise ValueError(
            f"{owner}: queue_size must be an int >= 1, a multiple of the keys one optimizer "
            f"step enqueues (global batch x accumulation_steps); got {queue_size!r}."
        )
    return int(queue_size)


def keys_per_step(local_batch: Any, accumulation_steps: int) -> Any:
    """The rows an optimizer step enqueues: the global batch times `accumulation_steps`.

    Args:
        local_batch: This replica's batch: its static size when known, else a
            scalar tensor.
        accumulation_steps: Micro-batches per optimizer step.

    Returns:
        An int when `local_batch` is a static size, else a scalar int32
        tensor (one all-reduce of the replicas' batch sizes).
    """
    ctx = tf.distribute.get_replica_context()
    replicas = ctx.num_replicas_in_sync if ctx is not None else 1
    if isinstance(local_batch, int):
        # A static per-replica size is every replica's: a strategy splits unevenly only
        # batches whose size the trace does not know.
        return local_batch * replicas * accumulation_steps
    size = tf.cast(local_batch, tf.int32)
    if replicas > 1:
        size = ctx.all_reduce(tf.distribute.ReduceOp.SUM, size)
    return size * accumulation_steps


def check_queue_fits(queue_size: int, per_step: Any, owner: str) -> list:
    """Checks that `queue_size` is a multiple of (and so not smaller than) `per_step`.

    The queue then always holds whole optimizer steps of keys, as MoCo's
    does. A static `per_step` is checked while the step is traced, before any
    training; a tensor at run time, before the forward pass (no weight moves).

    Args:
        queue_size: The queue's rows.
        per_step: The rows one optimizer step enqueues (see `keys_per_step`).
        owner: The method's name, for the message.

    Returns:
        The run-time checks to depend on (empty when checked statically).

    Raises:
        ValueError: When a static `per_step` does not divide `queue_size`.
    """
    message = (
        f"{owner}: queue_size={queue_size} must be a multiple of the keys one optimizer step "
        "enqueues, the global batch times accumulation_steps (so that the queue holds whole "
        "steps and is at least one step long)"
    )
    if isinstance(per_step, int):
        if per_step < 1 or queue_size % per_step:
            raise ValueError(
                f"{message}; a step enqueues {per_step}. Use queue_size="
                f"{_multiple(queue_size, per_step)}, or a global batch that divides it."
            )
        return []
    valid = tf.logical_and(per_step > 0, tf.equal(tf.math.floormod(queue_size, per_step), 0))
    check = tf.debugging.Assert(valid, [f"{message}; a step enqueues", per_step])
    return [check] if check is not None else []


def _multiple(queue_size: int, per_step: int) -> int:
    return max(1, round(queue_size / max(per_step, 1))) * max(per_step, 1)


def appended(queue: keras.Variable, rows: tf.Tensor) -> tf.Tensor:
    """The queue's value with its oldest `len(rows)` rows dropped and `rows` appended.

    Args:
        queue: The `[queue_size, ...]` state variable, oldest rows first.
        rows: The step's `[n, ...]` rows in global batch order, `n <= queue_size`.

    Returns:
        A tensor of the queue's shape and dtype.
    """
    rows = tf.cast(tf.stop_gradient(rows), queue.dtype)
    return tf.concat([queue.value[tf.shape(rows)[0] :], rows], axis=0)


def enqueue(queue: keras.Variable, keys: tf.Tensor) -> None:
    """Assigns `appended(queue, keys)` to the queue on every replica.

    Args:
        queue: The `[queue_size, ...]` state variable, oldest rows first.
        keys: The step's `[n, ...]` keys in global batch order, identical on
            every replica, `n <= queue_size`.
    """
    assign_on_every_replica([queue], [appended(queue, keys)])
