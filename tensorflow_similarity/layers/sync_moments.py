"""SyncBatchNormalization's moments (one collective each way) and normalisation."""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf
from keras import ops

from tensorflow_similarity import collectives


class Moments(NamedTuple):
    """What `cross_replica_moments` returns: a group's statistics and the moving-average update.

    Attributes:
        mean: `[channels]` mean of the caller's sync group.
        variance: `[channels]` (biased) variance of the caller's sync group.
        moving_mean_update: `[channels]` value the moving mean should absorb:
            the mean, over groups that saw data, of the group means (the
            group's own mean when all replicas form one group). The same on
            every replica, so that mirrored moving statistics never diverge.
        moving_variance_update: `[channels]`, likewise for the variance.
        seen: `[1]` or `[channels]`, positive where some replica of some group
            saw data (the global count for one group, else the number of groups
            that saw data). The same on every replica.
    """

    mean: tf.Tensor
    variance: tf.Tensor
    moving_mean_update: tf.Tensor
    moving_variance_update: tf.Tensor
    seen: tf.Tensor


class _LocalSums(NamedTuple):
    """One replica's shifted sums, `[channels]` each (`count` may be `[1]`)."""

    count: tf.Tensor
    shift: tf.Tensor
    first_sum: tf.Tensor
    second_sum: tf.Tensor


class _GroupMoments(NamedTuple):
    """Count, mean and variance of each sync group: `[channels]`, or `[groups, channels]`."""

    count: tf.Tensor
    mean: tf.Tensor
    variance: tf.Tensor


def cross_replica_moments(
    x: tf.Tensor,
    axis: int,
    weights: tf.Tensor | None,
    ctx: tf.distribute.ReplicaContext,
    group_size: int,
    exchange: str = "reduce",
    reference: tf.Tensor | None = None,
) -> Moments:
    """Per-channel mean and variance of `x` over a sync group, with one collective each way.

    Forward, in one pass over `x`: every replica shifts its data by a value of its
    own (its first position per channel; its masked mean under a mask) and
    computes, per channel, its count `n_i`, shift `s_i` and the sums
    `S1_i = sum(x - s_i)` and `S2_i = sum((x - s_i)^2)`: no `E[x^2] - E[x]^2`
    cancellation, whatever `|mean| / std`. One collective then merges them:

    * `"reduce"`: each replica re-centres its sums on `reference`, a shift
      every replica holds before the exchange (the layer passes the previous
      step's global mean, else the mirrored moving mean; 0 is used in a
      channel where it is NaN or infinite), in float64:
      with `o_i = s_i - r`, `T1_i = S1_i + n_i o_i` and `T2_i = S2_i +
      o_i (S1_i + T1_i)` are the sums of `x - r` and `(x - r)^2`. One
      all-reduce sums `(n_i, T1_i, T2_i)`: `2 C + 1` float64 values (`3 C` under
      a mask) whatever the number of replicas. Then `mean = r + T1 / N` and
      `M2 = T2 - T1^2 / N`, whose float64 cancellation costs a relative
      variance error of the order of `1e-16 (|mean - r| / std)^2`: a
      reference from the current batch would take a collective more, and
      the previous step's mean is usually within a few standard deviations.
      Groups are summed in one slot each (`collectives.sum_by_group`).
    * `"gather"`: the rows `(n_i, s_i, S1_i / n_i, M2_i)` of all replicas are
      gathered in `x`'s dtype (`4 C K` values) and each group is merged with
      Chan's formula around the count-weighted mean of its shifts
      (`_chan_merge`): exact to `x`'s rounding wherever the batch lies; for
      devices whose collectives have no float64 (TPUs).

    Backward: the gradients reaching the mean and variance come from every
    replica's loss, so they are summed over the group with one all-reduce of
    the packed `(d_mean, d_variance)`, then `dx = w (d_mean + 2 d_variance
    (x - mean)) / N` (0 where the weight is 0), as on a single device.

    Every op here is paid again at each trace and graph optimisation, on every
    replica and layer, so the common case (one group, no mask, static shapes)
    takes the shortest path: counts known at trace time, no reshape for
    channels-last, no per-group slots.

    Args:
        x: Input, float32 or float64.
        axis: Non-negative feature axis.
        weights: `None`, or 0/1 weights of `x`'s shape (the broadcast mask, 1
            where it is non-zero); positions of weight 0 are left out, NaN or
            infinite ones included.
        ctx: Replica context with more than one replica.
        group_size: Contiguous group size, dividing the number of replicas.
        exchange: `"reduce"` (default) or `"gather"`, see above.
        reference: `[channels]` shift identical on every replica, required by
            `"reduce"`; where it is NaN or infinite, 0 is used.

    Returns:
        A `Moments`: the caller's group `mean` and `variance`, and the
        `moving_mean_update`, `moving_variance_update` and `seen` that are the
        same on every replica (see `Moments`).
    """
    wide = tf.float64 if exchange == "reduce" else x.dtype
    local_count = _local_count(x, axis, weights, wide)

    @tf.custom_gradient
    def moments(x):
        if weights is None:
            local = _local_sums(x, axis, local_count)
        else:
            local = _masked_local_sums(x, axis, weights, local_count)
        if exchange == "reduce":
            groups = _reduce_exchange(local, ctx, group_size, reference, x.dtype)
        else:
            groups = _gather_exchange(local, ctx, group_size)
        count, result = _own_group_moments(groups, ctx, group_size)

        def grad(d_mean, d_variance, *unused):
            del unused
            return _moments_gradient(
                x, axis, weights, ctx, group_size, count, result.mean, d_mean, d_variance
            )

        return tuple(result), grad

    return Moments(*moments(x))


def _reduction_axes(x: tf.Tensor, axis: int) -> list[int]:
    return [i for i in range(len(x.shape)) if i != axis]


def _per_channel(vector: tf.Tensor, axis: int, ndim: int) -> tf.Tensor:
    """A `[channels]` vector, broadcastable against an input of rank `ndim`."""
    if axis == ndim - 1:
        return vector
    return tf.reshape(vector, [-1 if i == axis else 1 for i in range(ndim)])


def _local_count(x: tf.Tensor, axis: int, weights: tf.Tensor | None, dtype: tf.DType) -> tf.Tensor:
    """This replica's number of positions: `[1]` without a mask, else `[channels]`."""
    if weights is not None:
        return tf.cast(tf.reduce_sum(weights, axis=_reduction_axes(x, axis)), dtype)
    channels = x.shape[axis]
    positions = x.shape.num_elements()
    if positions is not None:
        # Counted at trace time when the shape is static (the usual case in a traced step).
        return tf.constant([positions // channels], dtype)
    return tf.reshape(tf.cast(tf.size(x), dtype) / channels, [1])


def _local_sums(x: tf.Tensor, axis: int, count: tf.Tensor) -> _LocalSums:
    """Sums of `x` shifted by its first position of each channel."""
    ndim = len(x.shape)
    reduction_axes = _reduction_axes(x, axis)
    if x.shape.num_elements():
        # A static, non-empty replica.
        shift = x[tuple(slice(None) if i == axis else 0 for i in range(ndim))]
        centred = x - _per_channel(shift, axis, ndim)
    else:
        # Kept broadcastable and summed to a vector, so that an empty replica has
        # shift 0 (and sums 0).
        first = x[tuple(slice(None) if i == axis else slice(0, 1) for i in range(ndim))]
        shift = tf.reduce_sum(first, axis=reduction_axes)
        centred = x - first
    return _LocalSums(count, shift, *_centred_sums(centred, reduction_axes))


def _masked_local_sums(x: tf.Tensor, axis: int, weights: tf.Tensor, count: tf.Tensor) -> _LocalSums:
    """Sums of the unmasked `x` shifted by their mean.

    Masked positions may hold padding far from the data, so the first position
    is no shift for them.
    """
    reduction_axes = _reduction_axes(x, axis)
    # Selected, not multiplied: masked padding may be NaN or infinite, and Keras
    # leaves it out of the statistics.
    selected = weights > 0
    shift = tf.math.divide_no_nan(
        tf.reduce_sum(tf.where(selected, x, 0.0), axis=reduction_axes), tf.cast(count, x.dtype)
    )
    centred = tf.where(selected, x - _per_channel(shift, axis, len(x.shape)), 0.0)
    return _LocalSums(count, shift, *_centred_sums(centred, reduction_axes))


def _centred_sums(centred: tf.Tensor, reduction_axes: list[int]) -> tuple[tf.Tensor, tf.Tensor]:
    first_sum = tf.reduce_sum(centred, axis=reduction_axes)
    second_sum = tf.reduce_sum(tf.square(centred), axis=reduction_axes)
    return first_sum, second_sum


def _reduce_exchange(
    local: _LocalSums,
    ctx: tf.distribute.ReplicaContext,
    group_size: int,
    reference: tf.Tensor,
    dtype: tf.DType,
) -> _GroupMoments:
    """The `"reduce"` exchange: sums re-centred on `reference`, all-reduced in float64."""
    channels = local.shift.shape[0]
    shared = tf.cast(reference, tf.float64)
    # A NaN or infinite moving mean (restored from a bad checkpoint, or left by an
    # empty batch in plain Keras) would make every sum non-finite; 0 is finite and
    # the same on every replica.
    shared = tf.where(tf.math.is_finite(shared), shared, tf.zeros_like(shared))
    offset = tf.cast(local.shift, tf.float64) - shared
    first_sum = tf.cast(local.first_sum, tf.float64)
    first = first_sum + local.count * offset
    second = tf.cast(local.second_sum, tf.float64) + offset * (first_sum + first)
    packed = tf.concat([local.count, first, second], 0)
    if group_size == ctx.num_replicas_in_sync:
        sums = ctx.all_reduce(tf.distribute.ReduceOp.SUM, packed)
    else:
        sums = collectives.sum_by_group(ctx, packed, group_size)
    count, first, second = tf.split(sums, [local.count.shape[0], channels, channels], -1)
    mean_offset = tf.math.divide_no_nan(first, count)
    m2 = tf.maximum(second - first * mean_offset, 0.0)
    mean = shared + mean_offset
    variance = tf.math.divide_no_nan(m2, count)
    return _GroupMoments(*(tf.cast(t, dtype) for t in (count, mean, variance)))


def _gather_exchange(
    local: _LocalSums, ctx: tf.distribute.ReplicaContext, group_size: int
) -> _GroupMoments:
    """The `"gather"` exchange: every replica's `(count, shift, offset, M2)`, merged by Chan."""
    channels = local.shift.shape[0]
    num_groups = ctx.num_replicas_in_sync // group_size
    count = local.count * tf.ones([channels], local.shift.dtype)
    offset = tf.math.divide_no_nan(local.first_sum, count)
    m2 = tf.maximum(local.second_sum - local.first_sum * offset, 0.0)
    row = tf.concat([count, local.shift, offset, m2], 0)
    shape = [group_size, 4, channels] if num_groups == 1 else [num_groups, group_size, 4, -1]
    rows = tf.reshape(collectives.gather_rows(ctx, row), shape)
    return _GroupMoments(*_chan_merge(*tf.unstack(rows, axis=-2), axis=-2))


def _own_group_moments(
    groups: _GroupMoments, ctx: tf.distribute.ReplicaContext, group_size: int
) -> tuple[tf.Tensor, Moments]:
    """The caller's group count and its `Moments`, from every group's statistics."""
    if group_size == ctx.num_replicas_in_sync:
        # One group: the moving statistics absorb its statistics.
        count, mean, variance = groups
        return count, Moments(mean, variance, mean, variance, count)
    group_id = tf.cast(ctx.replica_id_in_sync_group, tf.int32) // group_size
    count = tf.gather(groups.count, group_id)
    mean = tf.gather(groups.mean, group_id)
    variance = tf.gather(groups.variance, group_id)
    saw_data = tf.cast(groups.count > 0, mean.dtype)
    seen = tf.reduce_sum(saw_data, axis=0)
    mean_update = tf.math.divide_no_nan(tf.reduce_sum(saw_data * groups.mean, 0), seen)
    variance_update = tf.math.divide_no_nan(tf.reduce_sum(saw_data * groups.variance, 0), seen)
    return count, Moments(mean, variance, mean_update, variance_update, seen)


def _moments_gradient(
    x: tf.Tensor,
    axis: int,
    weights: tf.Tensor | None,
    ctx: tf.distribute.ReplicaContext,
    group_size: int,
    count: tf.Tensor,
    mean: tf.Tensor,
    d_mean: tf.Tensor | None,
    d_variance: tf.Tensor | None,
) -> tf.Tensor:
    """`dx` from the gradients reaching the group mean and variance on every replica."""
    d_mean = tf.zeros_like(mean) if d_mean is None else d_mean
    d_variance = tf.zeros_like(mean) if d_variance is None else d_variance
    packed = collectives.group_sum(ctx, tf.concat([d_mean, d_variance], 0), group_size)
    # dx = (d_mean + 2 d_variance (x - mean)) / N, as one multiply-add per element.
    inv_count = tf.math.reciprocal_no_nan(count)
    if count.shape[0] == 1:
        d_mean, d_variance = tf.split(packed * inv_count, 2)
    else:
        d_mean, d_variance = (part * inv_count for part in tf.split(packed, 2))
    scale = 2.0 * d_variance
    offset = d_mean - scale * mean
    ndim = len(x.shape)
    dx = x * _per_channel(scale, axis, ndim) + _per_channel(offset, axis, ndim)
    return dx if weights is None else tf.where(weights > 0, dx, tf.zeros_like(dx))


def normalize(
    x: tf.Tensor,
    mean: tf.Tensor,
    variance: tf.Tensor,
    offset: tf.Tensor | None,
    scale: tf.Tensor | None,
    epsilon: float,
    axis: int,
) -> tf.Tensor:
    """`scale (x - mean) / sqrt(variance + epsilon) + offset`, differentiable in all five.

    For float32 channels-last inputs this is one fused kernel each way
    (`FusedBatchNormV3` and its gradient in inference mode, any rank viewed as
    `[positions, 1, 1, channels]`), instead of the half-dozen elementwise ops of
    `ops.batch_normalization` and their gradients: the inference-mode gradient
    kernel returns `dx`, `sum(dy x_hat)` and `sum(dy)`, and the gradients of the
    mean and variance follow from the last two per channel
    (`-scale sum(dy) / std` and `-scale sum(dy x_hat) / (2 std^2)`).
    Other inputs (float64, channels-first) take `ops.batch_normalization`.

    Args:
        x: Input, float32 or float64.
        mean: `[channels]` mean to subtract.
        variance: `[channels]` variance to divide by (after adding `epsilon`).
        offset: `[channels]` offset, or `None` (0).
        scale: `[channels]` scale, or `None` (1).
        epsilon: Small float added to the variance.
        axis: Non-negative feature axis.

    Returns:
        The normalised `x`, of its shape and dtype.
    """
    if x.dtype != tf.float32 or axis != len(x.shape) - 1:
        return ops.batch_normalization(
            x, mean=mean, variance=variance, axis=axis, offset=offset, scale=scale, epsilon=epsilon
        )
    channels = x.shape[-1]
    scale = tf.ones([channels], x.dtype) if scale is None else scale
    offset = tf.zeros([channels], x.dtype) if offset is None else offset
    four_d = len(x.shape) == 4
    attributes = {"epsilon": epsilon, "data_format": "NHWC", "is_training": False}

    @tf.custom_gradient
    def fused(x, mean, variance, scale, offset):
        x4 = x if four_d else tf.reshape(x, [-1, 1, 1, channels])
        y, _, _, _, _, reserve = tf.raw_ops.FusedBatchNormV3(
            x=x4,
            scale=scale,
            offset=offset,
            mean=mean,
            variance=variance,
            **attributes,
        )

        def grad(dy):
            dx, d_scale, d_offset, _, _ = tf.raw_ops.FusedBatchNormGradV3(
                y_backprop=dy if four_d else tf.reshape(dy, tf.shape(x4)),
                x=x4,
                scale=scale,
                reserve_space_1=mean,
                reserve_space_2=variance,
                reserve_space_3=reserve,
                **attributes,
            )
            inv_variance = tf.math.reciprocal(variance + epsilon)
            d_mean = -scale * tf.sqrt(inv_variance) * d_offset
            d_variance = -0.5 * scale * inv_variance * d_scale
            dx = dx if four_d else tf.reshape(dx, tf.shape(x))
            return dx, d_mean, d_variance, d_scale, d_offset

        return (y if four_d else tf.reshape(y, tf.shape(x))), grad

    return fused(x, mean, variance, scale, offset)


def _chan_merge(
    counts: tf.Tensor, shifts: tf.Tensor, offsets: tf.Tensor, m2s: tf.Tensor, axis: int
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Merges replicas' (count, shift, offset, M2) along `axis` into (count, mean, variance).

    The reference `r` is the count-weighted mean of the shifts: a float within the
    data, so for data far from zero `s_i - r` is exact (Sterbenz) and the merge
    works on offsets of the order of the spread, never on the raw means.
    """
    count = tf.reduce_sum(counts, axis=axis)
    reference = tf.math.divide_no_nan(tf.reduce_sum(counts * shifts, axis=axis), count)
    offsets = (shifts - tf.expand_dims(reference, axis)) + offsets
    mean_offset = tf.math.divide_no_nan(tf.reduce_sum(counts * offsets, axis=axis), count)
    spread = counts * tf.square(offsets - tf.expand_dims(mean_offset, axis))
    m2 = tf.reduce_sum(m2s + spread, axis=axis)
    return count, reference + mean_offset, tf.math.divide_no_nan(m2, count)
