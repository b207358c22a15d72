"""Batch normalisation whose training statistics are those of the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import ops

from tensorflow_similarity import collectives
from tensorflow_similarity._validation import is_int


@keras.saving.register_keras_serializable(package="Similarity")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Cross-replica batch normalisation, exact for the global batch.

    In training mode inside a `tf.distribute` replica context with more than one
    replica, the mean and variance are those of the whole global batch (or of
    the caller's group of `group_size` replicas): outputs, moving statistics and
    gradients equal those of `keras.layers.BatchNormalization` on one device fed
    the concatenated batch. Everywhere else (no strategy, cross-replica context,
    one replica, inference, `trainable=False`) it is plain batch normalisation
    and issues no collective.

    Compared with Keras' `BatchNormalization(synchronized=True)`:

    * Robust: each replica computes its own count, mean and centred sum of
      squares (M2), and the replicas' triples are merged with Chan's parallel
      formula, so there is no `E[x^2] - E[x]^2` cancellation when
      `|mean| >> std`.
    * Cheap: one packed all-reduce per layer in the forward pass and one in the
      backward pass (Keras issues three and two).
    * Exact for unequal per-replica batches (a partial last batch); an empty
      replica contributes nothing and no NaN; an empty global batch leaves the
      moving statistics unchanged.
    * Masks: only unmasked positions are counted, across replicas.
    * float16 / bfloat16 inputs: statistics are computed and reduced in
      float32, and the result is cast back to the layer's compute dtype.

    Args:
        axis: Integer, the feature axis (`-1` channels-last, `1` channels-first).
            Defaults to `-1`.
        momentum: Momentum of the moving averages. Defaults to `0.99`.
        epsilon: Small float added to the variance. Defaults to `1e-3`.
        center: Whether to learn an offset `beta`. Defaults to `True`.
        scale: Whether to learn a scale `gamma`. Defaults to `True`.
        beta_initializer: Initializer of `beta`. Defaults to `"zeros"`.
        gamma_initializer: Initializer of `gamma`. Defaults to `"ones"`.
        moving_mean_initializer: Defaults to `"zeros"`.
        moving_variance_initializer: Defaults to `"ones"`.
        beta_regularizer: Optional regularizer of `beta`. Defaults to `None`.
        gamma_regularizer: Optional regularizer of `gamma`. Defaults to `None`.
        beta_constraint: Optional constraint of `beta`. Defaults to `None`.
        gamma_constraint: Optional constraint of `gamma`. Defaults to `None`.
        group_size: `None` (default) synchronises all replicas; an integer `g`
            synchronises contiguous groups of `g` replicas (replicas `0..g-1`,
            `g..2g-1`, ...). `g` must divide the number of replicas, which is
            checked at the first training call.
        **kwargs: Base layer keyword arguments (`name`, `dtype`, `trainable`).
            `synchronized` is accepted for compatibility with Keras configs and
            has no effect: this layer always synchronises. `renorm=True` is
            rejected (batch renormalisation is not synchronised).

    Raises:
        ValueError: If `group_size` is not a positive integer or `renorm=True`.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.layers import SyncBatchNormalization
    >>> strategy = tf.distribute.MirroredStrategy(["CPU:0"])
    >>> with strategy.scope():
    ...     model = keras.Sequential([keras.Input((8,)), SyncBatchNormalization()])
    >>> model(tf.ones((4, 8)), training=True).shape
    TensorShape([4, 8])
    """

    def __init__(
        self,
        axis: int = -1,
        momentum: float = 0.99,
        epsilon: float = 1e-3,
        center: bool = True,
        scale: bool = True,
        beta_initializer: Any = "zeros",
        gamma_initializer: Any = "ones",
        moving_mean_initializer: Any = "zeros",
        moving_variance_initializer: Any = "ones",
        beta_regularizer: Any = None,
        gamma_regularizer: Any = None,
        beta_constraint: Any = None,
        gamma_constraint: Any = None,
        group_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("synchronized", None)
        if kwargs.get("renorm"):
            raise ValueError(
                "SyncBatchNormalization does not support renorm=True: batch "
                "renormalisation corrections are not synchronised across replicas. "
                "Keep this layer a keras.layers.BatchNormalization, or set renorm=False."
            )
        if group_size is not None and (not is_int(group_size) or group_size < 1):
            raise ValueError(
                "group_size must be None (sync all replicas) or a positive integer "
                f"that divides the number of replicas. Received: group_size={group_size!r}"
            )
        super().__init__(
            axis=axis,
            momentum=momentum,
            epsilon=epsilon,
            center=center,
            scale=scale,
            beta_initializer=beta_initializer,
            gamma_initializer=gamma_initializer,
            moving_mean_initializer=moving_mean_initializer,
            moving_variance_initializer=moving_variance_initializer,
            beta_regularizer=beta_regularizer,
            gamma_regularizer=gamma_regularizer,
            beta_constraint=beta_constraint,
            gamma_constraint=gamma_constraint,
            synchronized=False,
            **kwargs,
        )
        self.group_size = group_size

    def call(self, inputs, training=None, mask=None):
        ctx = collectives.sync_replica_context()
        if not (training and self.trainable) or ctx is None:
            return super().call(inputs, training=training, mask=mask)
        group_size = collectives.check_group_size(self.group_size, ctx.num_replicas_in_sync)
        if mask is not None and len(mask.shape) != len(inputs.shape) - 1:
            raise ValueError(
                "The mask provided should be one dimension less than the inputs. "
                f"Received: mask.shape={mask.shape}, inputs.shape={inputs.shape}"
            )

        x = ops.cast(inputs, keras.backend.result_type(inputs.dtype, "float32"))
        weights = None
        if mask is not None:
            weights = ops.broadcast_to(
                ops.expand_dims(ops.cast(mask, x.dtype), axis=-1), ops.shape(x)
            )
        axis = self.axis % len(x.shape)
        mean, variance, count, mean_update, variance_update = cross_replica_moments(
            x, axis, weights, ctx, group_size
        )

        # Every replica assigns the same value, so mirrored statistics stay identical;
        # an empty global batch leaves them unchanged.
        seen = ops.stop_gradient(ops.any(count > 0))
        for stat, batch_value in (
            (self.moving_mean, mean_update),
            (self.moving_variance, variance_update),
        ):
            old = ops.cast(stat, x.dtype)
            new = old * self.momentum + ops.stop_gradient(batch_value) * (1.0 - self.momentum)
            stat.assign(ops.cast(ops.where(seen, new, old), stat.dtype))

        outputs = ops.batch_normalization(
            x,
            mean=mean,
            variance=variance,
            axis=self.axis,
            offset=ops.cast(self.beta, x.dtype) if self.center else None,
            scale=ops.cast(self.gamma, x.dtype) if self.scale else None,
            epsilon=self.epsilon,
        )
        return ops.cast(outputs, self.compute_dtype)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        for key in ("synchronized", "renorm", "renorm_clipping", "renorm_momentum"):
            config.pop(key, None)
        config["group_size"] = self.group_size
        return config


def cross_replica_moments(
    x: tf.Tensor,
    axis: int,
    weights: tf.Tensor | None,
    ctx: tf.distribute.ReplicaContext,
    group_size: int,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """Per-channel mean and variance of `x` over a sync group, with one collective each way.

    Forward, in one pass over `x`: every replica shifts its data by a value of its
    own (its first position per channel; its masked mean under a mask) and sums the
    shifted values and their squares. It packs per channel its count `n_i`, shift
    `s_i`, mean offset `d_i = mean(x - s_i)` and centred sum of squares `M2_i` into
    one row; the rows of all replicas are gathered with one all-reduce. Each group
    is merged with Chan's formula around a reference `r`, the count-weighted mean
    of its shifts: `o_i = (s_i - r) + d_i`, `M2 = sum M2_i + sum n_i (o_i - o)^2`,
    `mean = r + o`. Shifts lie within the data, so `s_i - r` is exact and no term
    cancels catastrophically, whatever `|mean| / std`; keeping `s_i` and `d_i`
    apart also keeps the rounding of each replica's mean out of the variance.

    Backward: the gradients reaching the mean and variance come from every
    replica's loss, so they are summed over the group with one all-reduce of
    the packed `(d_mean, d_variance)`, then `dx = w (d_mean + 2 d_variance
    (x - mean)) / N`, as on a single device.

    Args:
        x: Input, float32 or float64.
        axis: Non-negative feature axis.
        weights: `None`, or 0/1 weights of `x`'s shape (the broadcast mask).
        ctx: Replica context with more than one replica.
        group_size: Contiguous group size, dividing the number of replicas.

    Returns:
        `(mean, variance, count, moving_mean_update, moving_variance_update)`,
        each of shape `[channels]`. The first three are the caller's group
        statistics and the number of positions behind them. The last two are
        what the moving averages should absorb, the same on every replica so
        that mirrored moving statistics never diverge: the mean, over groups
        that saw data, of the group statistics (the group's own when all
        replicas form one group).
    """
    ndim = len(x.shape)
    reduction_axes = [i for i in range(ndim) if i != axis]
    broadcast_shape = [1] * ndim
    broadcast_shape[axis] = -1
    num_groups = ctx.num_replicas_in_sync // group_size
    group_id = tf.cast(ctx.replica_id_in_sync_group, tf.int32) // group_size

    if weights is None:
        local_count = tf.cast(tf.size(x), x.dtype) / tf.cast(tf.shape(x)[axis], x.dtype)
        local_count = tf.fill(tf.shape(x)[axis : axis + 1], local_count)
    else:
        local_count = tf.reduce_sum(weights, axis=reduction_axes)

    @tf.custom_gradient
    def moments(x):
        if weights is None:
            # The first position of each channel (zero on an empty replica).
            first = tuple(slice(None) if i == axis else slice(0, 1) for i in range(ndim))
            shift = tf.reduce_sum(x[first], axis=reduction_axes)
        else:
            # Masked positions may hold padding far from the data: shift by the masked mean.
            shift = tf.math.divide_no_nan(
                tf.reduce_sum(x * weights, axis=reduction_axes), local_count
            )
        centred = x - tf.reshape(shift, broadcast_shape)
        if weights is not None:
            centred = centred * weights
        shifted_sum = tf.reduce_sum(centred, axis=reduction_axes)
        shifted_squares = tf.reduce_sum(tf.square(centred), axis=reduction_axes)
        offset = tf.math.divide_no_nan(shifted_sum, local_count)
        local_m2 = tf.maximum(shifted_squares - shifted_sum * offset, 0.0)

        row = tf.concat([local_count, shift, offset, local_m2], 0)
        rows = collectives.gather_rows(ctx, row)
        if num_groups == 1:
            parts = tf.unstack(tf.reshape(rows, [group_size, 4, -1]), axis=1)
            count, mean, variance = _chan_merge(*parts, axis=0)
            # One group: the moving statistics absorb its statistics.
            moving_mean_update, moving_variance_update = mean, variance
        else:
            parts = tf.unstack(tf.reshape(rows, [num_groups, group_size, 4, -1]), axis=2)
            group_counts, group_means, group_variances = _chan_merge(*parts, axis=1)
            count = tf.gather(group_counts, group_id)
            mean = tf.gather(group_means, group_id)
            variance = tf.gather(group_variances, group_id)
            seen = tf.cast(group_counts > 0, x.dtype)
            groups_seen = tf.reduce_sum(seen, axis=0)
            moving_mean_update = tf.math.divide_no_nan(
                tf.reduce_sum(seen * group_means, 0), groups_seen
            )
            moving_variance_update = tf.math.divide_no_nan(
                tf.reduce_sum(seen * group_variances, 0), groups_seen
            )

        def grad(d_mean, d_variance, *unused):
            del unused
            d_mean = tf.zeros_like(mean) if d_mean is None else d_mean
            d_variance = tf.zeros_like(variance) if d_variance is None else d_variance
            packed = collectives.group_sum(ctx, tf.concat([d_mean, d_variance], 0), group_size)
            d_mean, d_variance = tf.split(packed, 2)
            # dx = (d_mean + 2 d_variance (x - mean)) / N, as one multiply-add per element.
            inv_count = tf.math.divide_no_nan(tf.ones_like(count), count)
            scale = 2.0 * d_variance * inv_count
            offset = (d_mean - 2.0 * d_variance * mean) * inv_count
            dx = x * tf.reshape(scale, broadcast_shape) + tf.reshape(offset, broadcast_shape)
            return dx if weights is None else dx * weights

        outputs = (mean, variance, count, moving_mean_update, moving_variance_update)
        return outputs, grad

    return moments(x)


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
