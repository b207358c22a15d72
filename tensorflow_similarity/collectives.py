"""Cross-replica reductions shared by synchronised layers and global-batch losses.

Everything here runs in a `tf.distribute` replica context (or is the identity
without one). Each helper issues exactly one collective (an `all_reduce` or one
batched `all_gather`), so a caller can count its collectives; `gather_with_owner`
and `gather_keys` issue one per dtype among their tensors. In a traced graph an
`all_reduce` is one op per replica, and an `all_gather` two (`MirroredStrategy`
first gathers the replicas' row counts, which may differ, then the rows).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
from keras import ops

from tensorflow_similarity._validation import is_int


def sync_replica_context() -> tf.distribute.ReplicaContext | None:
    """Returns the current replica context when there is more than one replica.

    Returns:
        The `tf.distribute.ReplicaContext` of the running replica, or `None` in a
        cross-replica context, without a strategy, or with a single replica:
        the cases where no collective is needed.
    """
    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync <= 1:
        return None
    return ctx


def check_group_size_argument(group_size: Any) -> None:
    """Raises `ValueError` unless `group_size` is `None` or a positive integer.

    The check of a sync group size as an argument, before the number of
    replicas is known (`check_group_size` resolves it against them).
    """
    if group_size is not None and (not is_int(group_size) or group_size < 1):
        raise ValueError(
            "group_size must be None (sync all replicas) or a positive integer "
            f"that divides the number of replicas. Received: group_size={group_size!r}"
        )


def check_group_size(group_size: int | None, num_replicas: int) -> int:
    """Resolves a sync group size against the number of replicas.

    Args:
        group_size: `None` (all replicas) or a positive group size.
        num_replicas: Replicas in sync.

    Returns:
        The effective group size (`num_replicas` when `group_size` is `None`).

    Raises:
        ValueError: If `group_size` does not divide `num_replicas`.
    """
    if group_size is None:
        return num_replicas
    if num_replicas % group_size:
        raise ValueError(
            f"group_size={group_size} does not divide the {num_replicas} replicas in sync. "
            f"Use a group size that divides {num_replicas} (for example "
            f"{_divisors(num_replicas)}), or group_size=None to sync all replicas."
        )
    return group_size


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def gather_rows(ctx: tf.distribute.ReplicaContext, row: tf.Tensor) -> tf.Tensor:
    """Gathers a 1-D tensor from every replica with a single all-reduce.

    Each replica writes its row into its own slot of a zero matrix; summing the
    matrices is then an exact gather (adding zeros loses nothing) and works the
    same under every strategy and cross-device implementation. Rows must be
    finite (a non-finite value would spread to the other slots).

    Args:
        ctx: The replica context.
        row: A 1-D tensor of the same length on every replica.

    Returns:
        A `[num_replicas, len(row)]` tensor whose row `i` is replica `i`'s `row`.
    """
    slot = tf.one_hot(ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync, dtype=row.dtype)
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, slot[:, tf.newaxis] * row[tf.newaxis])


def sum_by_group(ctx: tf.distribute.ReplicaContext, value: tf.Tensor, group_size: int) -> tf.Tensor:
    """Sums a 1-D tensor within every sync group at once, with a single all-reduce.

    Each replica writes `value` into its group's slot of a zero matrix, and the
    matrices are summed: an exact per-group sum (adding zeros loses nothing)
    whose size is the number of groups times `len(value)`, not the number of
    replicas. Values must be finite (a non-finite one would spread to the
    other slots).

    Args:
        ctx: The replica context.
        value: A 1-D tensor of the same length on every replica.
        group_size: Contiguous group size dividing the number of replicas.

    Returns:
        A `[num_groups, len(value)]` tensor whose row `g` is the sum over group `g`.
    """
    num_groups = ctx.num_replicas_in_sync // group_size
    if num_groups == 1:
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)[tf.newaxis]
    group_id = tf.cast(ctx.replica_id_in_sync_group, tf.int32) // group_size
    slot = tf.one_hot(group_id, num_groups, dtype=value.dtype)
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, slot[:, tf.newaxis] * value[tf.newaxis])


def group_sum(ctx: tf.distribute.ReplicaContext, value: tf.Tensor, group_size: int) -> tf.Tensor:
    """Sums a 1-D tensor over the caller's sync group with a single all-reduce.

    Args:
        ctx: The replica context.
        value: A 1-D tensor of the same length on every replica.
        group_size: Contiguous group size dividing the number of replicas.

    Returns:
        The sum of `value` over the replicas of the caller's group.
    """
    if group_size == ctx.num_replicas_in_sync:
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
    group_id = tf.cast(ctx.replica_id_in_sync_group, tf.int32) // group_size
    return tf.gather(sum_by_group(ctx, value, group_size), group_id)


def gather_global_batch(*tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """Concatenates each tensor's batch over all replicas, differentiably.

    One batched `ReplicaContext.all_gather` serves every tensor. Replicas may
    hold different batch sizes (a partial last batch); the result is ordered by
    replica id. Outside a replica context with more than one replica the
    tensors are returned unchanged.

    Args:
        *tensors: Tensors whose first axis is the local batch.

    Returns:
        The gathered tensors, each of shape `[global_batch, ...]`.
    """
    ctx = sync_replica_context()
    if ctx is None:
        return tensors
    # Under MultiWorkerMirroredStrategy with one replica per worker, all_gather
    # uses each tensor's own device as its destination, and a tf.function
    # argument (a placeholder, such as labels passed to a step) has none:
    # TensorFlow then fails with "destinations can not be empty". An identity
    # created here takes the replica's device.
    placed = [t if t.device else tf.identity(t) for t in map(tf.convert_to_tensor, tensors)]
    return tuple(ctx.all_gather(placed, axis=0))


def gather_with_owner(*tensors: tf.Tensor) -> tuple[tuple[tf.Tensor, ...], tf.Tensor]:
    """Gathers each tensor's global batch and marks this replica's rows.

    As `gather_global_batch` (differentiable, in replica order, replicas may
    hold different batch sizes), with one `all_gather` per distinct dtype
    among `tensors`: the tensors of one dtype travel side by side as the
    columns of one matrix. Outside a replica context with more than one
    replica the tensors are returned unchanged, all rows marked.

    Args:
        *tensors: Tensors whose first axis is the local batch.

    Returns:
        `(gathered, mine)`: the `[global_batch, ...]` tensors, and the
        `[global_batch]` boolean mask of the rows that came from this replica.
    """
    tensors = tuple(map(tf.convert_to_tensor, tensors))
    ctx = sync_replica_context()
    if ctx is None:
        return tensors, tf.fill(tf.shape(tensors[0])[:1], True)
    groups: dict[tf.DType, list[int]] = {}
    for index, tensor in enumerate(tensors):
        groups.setdefault(tensor.dtype, []).append(index)
    first = tensors[0]
    replica = tf.cast(ctx.replica_id_in_sync_group, first.dtype)
    gathered: list[tf.Tensor] = list(tensors)
    owner = None
    for dtype, indices in groups.items():
        # One matrix per dtype: a batched all_gather's gradient needs tensors of
        # one shape. Replica ids are small integers, exact in every dtype; they
        # ride with the first dtype as one more column, at no collective's cost.
        columns = [tf.reshape(tensors[i], [tf.shape(tensors[i])[0], -1]) for i in indices]
        if dtype == first.dtype:
            columns.append(tf.fill([tf.shape(first)[0], 1], replica))
        widths = [tf.shape(c)[1] for c in columns]
        (matrix,) = gather_global_batch(tf.concat(columns, axis=1))
        parts = tf.split(matrix, tf.stack(widths), axis=1, num=len(widths))
        if dtype == first.dtype:
            owner = parts.pop()[:, 0]
        for i, part in zip(indices, parts, strict=True):
            shape = tf.concat([[-1], tf.shape(tensors[i])[1:]], axis=0)
            value = tf.reshape(part, shape)
            value.set_shape(tf.TensorShape([None]).concatenate(tensors[i].shape[1:]))
            gathered[i] = value
    return tuple(gathered), tf.equal(owner, replica)


def gather_keys(*tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """Returns each tensor's global batch with this replica's own rows first.

    The keys a replica's queries are compared with: its own rows (the local
    tensors themselves), then the other replicas' rows in replica order. A
    query `i` of this replica is therefore key `i`, as on one device where
    the queries are the batch. Differentiable: the gradient reaching another
    replica's rows is sent back to it by the gather. Collectives as
    `gather_with_owner`; outside a replica context with more than one
    replica the tensors are returned unchanged.

    Args:
        *tensors: Tensors whose first axis is the local batch.

    Returns:
        The tensors of the global batch, each `[global_batch, ...]`, this
        replica's rows first.
    """
    if sync_replica_context() is None:
        return tensors
    gathered, mine = gather_with_owner(*tensors)
    return own_rows_first(tensors, gathered, mine)


def own_rows_first(
    local: tuple[tf.Tensor, ...], gathered: tuple[tf.Tensor, ...], mine: tf.Tensor
) -> tuple[tf.Tensor, ...]:
    """Returns `gathered` reordered with the `local` rows first (see `gather_keys`)."""
    others = tf.logical_not(mine)
    return tuple(
        tf.concat([tf.convert_to_tensor(a), tf.boolean_mask(b, others)], axis=0)
        for a, b in zip(local, gathered, strict=True)
    )


def global_sum(value: tf.Tensor) -> tf.Tensor:
    """Sums `value` over all replicas with one differentiable all-reduce.

    Args:
        value: A tensor of the same shape on every replica.

    Returns:
        The sum over replicas, or `value` itself without a multi-replica
        replica context.
    """
    ctx = sync_replica_context()
    if ctx is None:
        return value
    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)


def scale_for_replicas(loss: tf.Tensor) -> tf.Tensor:
    """Scales a per-replica copy of a global loss so that replicas sum to it.

    Args:
        loss: The loss of the global batch, identical on every replica.

    Returns:
        `loss / K` in a replica context with `K > 1` replicas, else `loss`.
    """
    ctx = sync_replica_context()
    if ctx is None:
        return loss
    return loss * ops.cast(1.0 / ctx.num_replicas_in_sync, loss.dtype)
