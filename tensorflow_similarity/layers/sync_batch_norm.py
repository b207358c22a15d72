"""Batch normalisation whose training statistics are those of the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import ops

from tensorflow_similarity import collectives
from tensorflow_similarity._validation import check_choice, is_int

EXCHANGES = ("auto", "reduce", "gather")


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
      squares (M2) around a shift within its data, so there is no
      `E[x^2] - E[x]^2` cancellation when `|mean| >> std`; the replicas' parts
      are merged in float64 around the shared moving mean, or with Chan's
      parallel formula (see `exchange`).
    * Cheap: one packed collective per layer in the forward pass and one
      all-reduce in the backward pass (Keras issues three and two); with
      `exchange="reduce"` the forward one is `2 C + 1` float64 values for `C`
      channels, whatever the number of replicas.
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
        exchange: How the forward pass combines the replicas' statistics:
            `"reduce"` (an all-reduce of per-channel sums re-centred on the
            moving mean, in float64: constant size in the number of replicas),
            `"gather"` (one float32 row per replica, merged with Chan's
            formula: for devices without float64 collectives) or `"auto"`
            (default: `"gather"` under `TPUStrategy`, else `"reduce"`). Both
            are exact to float32 rounding for `|mean| / std` up to 1e4.
        **kwargs: Base layer keyword arguments (`name`, `dtype`, `trainable`).
            `synchronized` is accepted for compatibility with Keras configs and
            has no effect: this layer always synchronises, and its
            `synchronized` attribute reads `True`. `renorm=True` is
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
        exchange: str = "auto",
        **kwargs: Any,
    ) -> None:
        kwargs.pop("synchronized", None)
        check_choice(
            "exchange",
            exchange,
            EXCHANGES,
            owner="SyncBatchNormalization",
            hint="('reduce': one all-reduce of per-channel sums, constant in the number of "
            "replicas; 'gather': one row per replica; 'auto': 'reduce', or 'gather' under "
            "TPUStrategy, whose collectives have no float64).",
        )
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
        self.exchange = exchange

    @property
    def synchronized(self) -> bool:
        """`True`: the layer synchronises its statistics (through its own collectives).

        Keras' `BatchNormalization` reads this attribute to pick its own
        synchronised moments; while this layer delegates a call that needs no
        synchronisation to Keras, it reads `False`, so Keras' path stays off.
        """
        return not getattr(self, "_delegating", False)

    @synchronized.setter
    def synchronized(self, value: bool) -> None:
        # Keras' constructor assigns the flag; synchronisation here is always on.
        del value

    def call(self, inputs, training=None, mask=None):
        ctx = collectives.sync_replica_context()
        if not (training and self.trainable) or ctx is None:
            self._delegating = True
            try:
                return super().call(inputs, training=training, mask=mask)
            finally:
                self._delegating = False
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
        exchange = self.exchange
        if exchange == "auto":
            on_tpu = isinstance(tf.distribute.get_strategy(), tf.distribute.TPUStrategy)
            exchange = "gather" if on_tpu else "reduce"
        # Read once: the moving mean is both the shift of the "reduce" exchange (the
        # mirrored variable is the same on every replica, a shift they share without
        # communicating) and the start of the moving-average update.
        old_mean = ops.cast(self.moving_mean, x.dtype)
        old_variance = ops.cast(self.moving_variance, x.dtype)
        mean, variance, mean_update, variance_update, seen = cross_replica_moments(
            x, axis, weights, ctx, group_size, exchange=exchange, reference=old_mean
        )

        # Every replica assigns the same value, so mirrored statistics stay identical;
        # an empty global batch (keep 1, rate 0) leaves them unchanged. The update is
        # Keras' `old * momentum + new * (1 - momentum)`: `old + (new - old) * rate`
        # would cancel when a small variance replaces a large one.
        if weights is None and x.shape.num_elements():
            # A static, non-empty replica without a mask: every replica saw data (the
            # common case, taken at trace time: three ops fewer per layer).
            keep, rate = self.momentum, 1.0 - self.momentum
        else:
            seen = seen > 0
            keep = tf.where(seen, tf.constant(self.momentum, x.dtype), tf.constant(1.0, x.dtype))
            rate = tf.where(
                seen, tf.constant(1.0 - self.momentum, x.dtype), tf.constant(0.0, x.dtype)
            )
        for stat, old, batch_value in (
            (self.moving_mean, old_mean, mean_update),
            (self.moving_variance, old_variance, variance_update),
        ):
            stat.assign(ops.cast(old * keep + batch_value * rate, stat.dtype))

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
        config["exchange"] = self.exchange
        return config


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
