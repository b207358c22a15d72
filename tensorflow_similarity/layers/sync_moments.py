"""SyncBatchNormalization's moments (one collective each way) and normalisation."""

from __future__ import annotations

import tensorflow as tf
from keras import ops

from tensorflow_similarity import collectives


def cross_replica_moments(
    x: tf.Tensor,
    axis: int,
    weights: tf.Tensor | None,
    ctx: tf.distribute.ReplicaContext,
    group_size: int,
    exchange: str = "reduce",
    reference: tf.Tensor | None = None,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Per-channel mean and variance of `x` over a sync group, with one collective each way.

    Forward, in one pass over `x`: every replica shifts its data by a value of its
    own (its first position per channel; its masked mean under a mask) and
    computes, per channel, its count `n_i`, shift `s_i` and the sums
    `S1_i = sum(x - s_i)` and `S2_i = sum((x - s_i)^2)`: no `E[x^2] - E[x]^2`
    cancellation, whatever `|mean| / std`. One collective then merges them:

    * `"reduce"`: each replica re-centres its sums on `reference`, a shift
      every replica holds (the mirrored moving mean), in float64:
      with `o_i = s_i - r`, `T1_i = S1_i + n_i o_i` and `T2_i = S2_i +
      o_i (S1_i + T1_i)` are the sums of `x - r` and `(x - r)^2`. One
      all-reduce sums `(n_i, T1_i, T2_i)`: `2 C + 1` float64 values (`3 C` under
      a mask) whatever the number of replicas. Then `mean = r + T1 / N` and
      `M2 = T2 - T1^2 / N`, whose float64 cancellation costs a relative
      variance error of about `1e-16 (|mean - r| / std)^2` (1e-8 at 1e4).
      Groups are summed in one slot each (`collectives.sum_by_group`).
    * `"gather"`: the rows `(n_i, s_i, S1_i / n_i, M2_i)` of all replicas are
      gathered in float32 (`4 C K` values) and each group is merged with Chan's
      formula around the count-weighted mean of its shifts (`_chan_merge`); for
      devices whose collectives have no float64 (TPUs).

    Backward: the gradients reaching the mean and variance come from every
    replica's loss, so they are summed over the group with one all-reduce of
    the packed `(d_mean, d_variance)`, then `dx = w (d_mean + 2 d_variance
    (x - mean)) / N`, as on a single device.

    Every op here is paid again at each trace and graph optimisation, on every
    replica and layer, so the common case (one group, no mask, static shapes)
    takes the shortest path: counts known at trace time, no reshape for
    channels-last, no per-group slots.

    Args:
        x: Input, float32 or float64.
        axis: Non-negative feature axis.
        weights: `None`, or 0/1 weights of `x`'s shape (the broadcast mask).
        ctx: Replica context with more than one replica.
        group_size: Contiguous group size, dividing the number of replicas.
        exchange: `"reduce"` (default) or `"gather"`, see above.
        reference: `[channels]` shift identical on every replica, required by
            `"reduce"`.

    Returns:
        `(mean, variance, moving_mean_update, moving_variance_update, seen)`.
        The first two, `[channels]`, are the caller's group statistics. The next
        two are what the moving averages should absorb, the same on every
        replica so that mirrored moving statistics never diverge: the mean,
        over groups that saw data, of the group statistics (the group's own
        when all replicas form one group). `seen`, of shape `[1]` or
        `[channels]`, is positive where some replica of some group saw data,
        also the same on every replica.
    """
    ndim = len(x.shape)
    reduction_axes = [i for i in range(ndim) if i != axis]
    channels = x.shape[axis]
    num_groups = ctx.num_replicas_in_sync // group_size
    wide = tf.float64 if exchange == "reduce" else x.dtype

    def per_channel(vector):
        """A `[channels]` vector, broadcastable against `x`."""
        if axis == ndim - 1:
            return vector
        return tf.reshape(vector, [-1 if i == axis else 1 for i in range(ndim)])

    positions = x.shape.num_elements()
    if weights is None:
        # Counted at trace time when the shape is static (the usual case in a
        # traced step); one count per replica, not per channel.
        if positions is not None:
            local_count = tf.constant([positions // channels], wide)
        else:
            local_count = tf.reshape(tf.cast(tf.size(x), wide) / channels, [1])
    else:
        local_count = tf.cast(tf.reduce_sum(weights, axis=reduction_axes), wide)

    def local_sums(x):
        """`(shift, S1, S2)` of this replica, `[channels]` each."""
        if weights is None and positions:
            # A static, non-empty replica: its first position of each channel.
            shift = x[tuple(slice(None) if i == axis else 0 for i in range(ndim))]
            centred = x - per_channel(shift)
        elif weights is None:
            # The first position of each channel, kept broadcastable; summed to a
            # vector so that an empty replica has shift 0 (and sums 0).
            first = x[tuple(slice(None) if i == axis else slice(0, 1) for i in range(ndim))]
            shift = tf.reduce_sum(first, axis=reduction_axes)
            centred = x - first
        else:
            # Masked positions may hold padding far from the data: shift by the masked mean.
            count = tf.cast(local_count, x.dtype)
            shift = tf.math.divide_no_nan(tf.reduce_sum(x * weights, axis=reduction_axes), count)
            centred = (x - per_channel(shift)) * weights
        first_sum = tf.reduce_sum(centred, axis=reduction_axes)
        second_sum = tf.reduce_sum(tf.square(centred), axis=reduction_axes)
        return shift, first_sum, second_sum

    def reduce_merge(shift, first_sum, second_sum):
        """Group `(count, mean, variance)`, `[channels]` (or `[groups, channels]`)."""
        shared = tf.cast(reference, wide)
        offset = tf.cast(shift, wide) - shared
        first_sum = tf.cast(first_sum, wide)
        first = first_sum + local_count * offset
        second = tf.cast(second_sum, wide) + offset * (first_sum + first)
        packed = tf.concat([local_count, first, second], 0)
        if num_groups == 1:
            sums = ctx.all_reduce(tf.distribute.ReduceOp.SUM, packed)
        else:
            sums = collectives.sum_by_group(ctx, packed, group_size)
        count, first, second = tf.split(sums, [local_count.shape[0], channels, channels], -1)
        mean_offset = tf.math.divide_no_nan(first, count)
        m2 = tf.maximum(second - first * mean_offset, 0.0)
        mean = shared + mean_offset
        variance = tf.math.divide_no_nan(m2, count)
        return tuple(tf.cast(t, x.dtype) for t in (count, mean, variance))

    def gather_merge(shift, first_sum, second_sum):
        """Group `(count, mean, variance)`, `[channels]` (or `[groups, channels]`)."""
        count = local_count * tf.ones([channels], x.dtype)
        offset = tf.math.divide_no_nan(first_sum, count)
        m2 = tf.maximum(second_sum - first_sum * offset, 0.0)
        row = tf.concat([count, shift, offset, m2], 0)
        shape = [group_size, 4, channels] if num_groups == 1 else [num_groups, group_size, 4, -1]
        rows = tf.reshape(collectives.gather_rows(ctx, row), shape)
        return _chan_merge(*tf.unstack(rows, axis=-2), axis=-2)

    merge = reduce_merge if exchange == "reduce" else gather_merge

    @tf.custom_gradient
    def moments(x):
        group_count, group_mean, group_variance = merge(*local_sums(x))
        if num_groups == 1:
            count, mean, variance = group_count, group_mean, group_variance
            # One group: the moving statistics absorb its statistics.
            mean_update, variance_update, seen = mean, variance, count
        else:
            group_id = tf.cast(ctx.replica_id_in_sync_group, tf.int32) // group_size
            count = tf.gather(group_count, group_id)
            mean = tf.gather(group_mean, group_id)
            variance = tf.gather(group_variance, group_id)
            saw_data = tf.cast(group_count > 0, x.dtype)
            seen = tf.reduce_sum(saw_data, axis=0)
            mean_update = tf.math.divide_no_nan(tf.reduce_sum(saw_data * group_mean, 0), seen)
            variance_update = tf.math.divide_no_nan(
                tf.reduce_sum(saw_data * group_variance, 0), seen
            )

        def grad(d_mean, d_variance, *unused):
            del unused
            d_mean = tf.zeros_like(mean) if d_mean is None else d_mean
            d_variance = tf.zeros_like(variance) if d_variance is None else d_variance
            packed = collectives.group_sum(ctx, tf.concat([d_mean, d_variance], 0), group_size)
            # dx = (d_mean + 2 d_variance (x - mean)) / N, as one multiply-add per element.
            inv_count = tf.math.reciprocal_no_nan(count)
            if count.shape[0] == 1:
                d_mean, d_variance = tf.split(packed * inv_count, 2)
            else:
                d_mean, d_variance = (part * inv_count for part in tf.split(packed, 2))
            scale = 2.0 * d_variance
            offset = d_mean - scale * mean
            dx = x * per_channel(scale) + per_channel(offset)
            return dx if weights is None else dx * weights

        return (mean, variance, mean_update, variance_update, seen), grad

    return moments(x)


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
