"""Batch normalisation whose training statistics are those of the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import ops

from tensorflow_similarity import collectives
from tensorflow_similarity._validation import check_choice, check_int, check_number
from tensorflow_similarity.layers.sync_moments import cross_replica_moments, normalize

EXCHANGES = ("auto", "reduce", "gather")


class _Untracked:
    """Holds a variable where neither Keras nor TensorFlow tracks it (a plain object)."""

    def __init__(self, variable: tf.Variable) -> None:
        self.variable = variable


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
      are merged in float64 around a shift every replica already holds (the
      previous training step's global batch mean, see `exchange`), or with
      Chan's parallel formula.
    * Cheap: one packed collective per layer in the forward pass and one
      all-reduce in the backward pass (Keras issues three and two); with
      `exchange="reduce"` the forward one is `2 C + 1` float64 values for `C`
      channels, whatever the number of replicas. float32 channels-last
      inputs are normalised by the fused batch-norm kernel each way (Keras 3
      composes elementwise ops).
    * Exact for unequal per-replica batches (a partial last batch); an empty
      replica contributes nothing and no NaN; an empty global batch leaves the
      moving statistics unchanged.
    * Masks, as in Keras: every position whose mask is non-zero counts once
      (a mask value selects, it does not weigh), and the others, NaN or
      infinite padding included, are left out of the statistics, across
      replicas.
    * float16 / bfloat16 inputs: statistics are computed and reduced in
      float32, and the result is cast back to the layer's compute dtype.

    The previous training step's global batch mean (the `"reduce"` reference)
    is kept in a variable that is no weight and is never saved: `weights`,
    `get_weights`, `set_weights`, `.keras` and `.weights.h5` files and
    TensorFlow checkpoints are those of `keras.layers.BatchNormalization`, so
    weights copy one to one between the two layers and files saved before the
    variable existed load unchanged. Built inside a strategy's scope, it is
    mirrored as the moving statistics are, and every replica assigns it the
    same value.

    Args:
        axis: Integer, the feature axis (`-1` channels-last, `1` channels-first).
            Defaults to `-1`.
        momentum: Momentum of the moving averages, a number in `[0, 1]`.
            Defaults to `0.99`.
        epsilon: Small float added to the variance, finite and `> 0`.
            Defaults to `1e-3`.
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
            `"reduce"` (an all-reduce of per-channel sums re-centred on a
            shared reference, in float64: constant size in the number of
            replicas), `"gather"` (one row per replica in the input's dtype,
            merged with Chan's formula: its size grows with the number of
            replicas) or `"auto"` (default: `"gather"` under `TPUStrategy`,
            whose collectives have no float64, else `"reduce"`). `"gather"`
            is exact to the input's rounding wherever the batch lies.
            `"reduce"` adds a relative variance error of the order of
            `1e-16 (|batch mean - reference| / std)^2` (float64
            cancellation). The reference is the previous training step's
            global batch mean (under `group_size`, the mean of the groups'
            means), which every replica holds after that step's all-reduce,
            so it costs no collective: the error stays under about 1e-12
            while the batch mean moves by less than 100 standard deviations
            from one step to the next, and within float32 rounding (1e-8)
            while it moves by less than about 1e4 of them. The first
            training step after creation or after loading weights, and a
            channel whose previous mean is NaN or infinite, are centred on
            the moving mean instead, whose distance to the batch is what
            counts then; and on 0 in a channel whose moving mean is NaN or
            infinite too, so that such a moving mean never reaches the
            outputs.
        **kwargs: Base layer keyword arguments (`name`, `dtype`, `trainable`).
            `synchronized` is accepted for compatibility with Keras configs and
            has no effect: the layer's `synchronized` attribute is always
            `True`, in Keras' sense (the training statistics are those of the
            global batch), though the synchronisation is this layer's own,
            never Keras' `synchronized=True` path. `renorm=True` is
            rejected (batch renormalisation is not synchronised).

    Raises:
        ValueError: If `axis` is not an integer, `momentum` is not a number in
            `[0, 1]`, `epsilon` is not a finite number `> 0`, `group_size` is
            not a positive integer, `exchange` is unknown or `renorm=True`
            (at construction); if `axis` is outside `[-rank, rank - 1]` for
            the input's rank (at build).

    Example:

    >>> import keras
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
        owner = "SyncBatchNormalization"
        if isinstance(kwargs.get("name"), str):
            owner = f"SyncBatchNormalization {kwargs['name']!r}"
        # Keras' constructor coerces with int() and float() and checks no range:
        # axis=1.5 would become 1, momentum="0.9" 0.9, momentum=2 would drive the
        # moving variance negative and epsilon=-1 the outputs to NaN.
        axis = check_int(
            "axis",
            axis,
            owner=owner,
            hint="Use the feature axis: -1 for channels-last, 1 for channels-first.",
        )
        momentum = check_number(
            "momentum",
            momentum,
            low=0,
            high=1,
            owner=owner,
            hint="The moving statistics are `old * momentum + batch * (1 - momentum)`: "
            "use a value such as 0.99 (the default) or 0.9.",
        )
        epsilon = check_number(
            "epsilon",
            epsilon,
            positive=True,
            owner=owner,
            hint="It is added to the variance before the square root: use a small "
            "positive value such as 1e-3 (the default) or 1e-5.",
        )
        check_choice(
            "exchange",
            exchange,
            EXCHANGES,
            owner=owner,
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
        collectives.check_group_size_argument(group_size)
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
            synchronized=True,
            **kwargs,
        )
        self.group_size = group_size
        self.exchange = exchange

    def build(self, input_shape) -> None:
        rank = len(input_shape)
        if not -rank <= self.axis < rank:
            raise ValueError(
                f"SyncBatchNormalization {self.name!r}: axis={self.axis} is out of range "
                f"for an input of rank {rank} (shape {tuple(input_shape)}): the axis must be "
                f"in [{-rank}, {rank - 1}]. Use the feature axis of the input, -1 for "
                "channels-last or 1 for channels-first."
            )
        super().build(input_shape)
        # Held out of Keras' tracking (`weights`, `get_weights`/`set_weights`, `.keras`
        # and `.weights.h5` files stay those of `keras.layers.BatchNormalization`, so
        # old files load and the batch-norm conversions copy weights one to one) and of
        # TensorFlow's (checkpoints keep their layout: an earlier one restores under
        # `assert_existing_objects_matched`; only a distributed training step reads
        # it, and such a step is never exported). Created here, inside the caller's
        # strategy scope as the moving statistics are, it is mirrored like them; with
        # no aggregation each replica writes its own copy, the same value on all.
        self._step_reference = _Untracked(
            tf.Variable(
                self._no_reference(),
                trainable=False,
                name="previous_batch_mean",
                aggregation=tf.VariableAggregation.NONE,
            )
        )

    def load_own_variables(self, store) -> None:
        super().load_own_variables(store)
        # The last step's mean belongs to the weights being replaced.
        self._step_reference.variable.assign(self._no_reference())

    def _no_reference(self) -> tf.Tensor:
        # NaN: the next training step is centred on the moving mean.
        return tf.fill(self.moving_mean.shape, tf.constant(float("nan"), self.moving_mean.dtype))

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
            # Keras selects every position whose mask is non-zero (a mask of 2 is
            # not a weight of 2).
            selected = ops.cast(ops.cast(mask, "bool"), x.dtype)
            weights = ops.broadcast_to(ops.expand_dims(selected, axis=-1), ops.shape(x))
        axis = self.axis % len(x.shape)
        exchange = self.exchange
        if exchange == "auto":
            on_tpu = isinstance(tf.distribute.get_strategy(), tf.distribute.TPUStrategy)
            exchange = "gather" if on_tpu else "reduce"
        old_mean = ops.cast(self.moving_mean, x.dtype)
        old_variance = ops.cast(self.moving_variance, x.dtype)
        reference = None
        if exchange == "reduce":
            # The shift must be the same on every replica before the all-reduce, and
            # the previous step's global mean is, without a collective more; the moving
            # mean (which lags the data by its momentum) where there is none.
            previous = ops.cast(self._step_reference.variable, x.dtype)
            reference = tf.where(tf.math.is_finite(previous), previous, old_mean)
        moments = cross_replica_moments(
            x, axis, weights, ctx, group_size, exchange=exchange, reference=reference
        )

        # Every replica assigns the same value, so mirrored statistics stay identical;
        # an empty global batch (keep 1, rate 0) leaves them unchanged. The update is
        # Keras' `old * momentum + new * (1 - momentum)`: `old + (new - old) * rate`
        # would cancel when a small variance replaces a large one.
        if weights is None and x.shape.num_elements():
            # A static, non-empty replica without a mask: every replica saw data (the
            # common case, taken at trace time: three ops fewer per layer).
            keep, rate = self.momentum, 1.0 - self.momentum
            seen = None
        else:
            seen = moments.seen > 0
            keep = tf.where(seen, tf.constant(self.momentum, x.dtype), tf.constant(1.0, x.dtype))
            rate = tf.where(
                seen, tf.constant(1.0 - self.momentum, x.dtype), tf.constant(0.0, x.dtype)
            )
        for stat, old, batch_value in (
            (self.moving_mean, old_mean, moments.moving_mean_update),
            (self.moving_variance, old_variance, moments.moving_variance_update),
        ):
            stat.assign(ops.cast(old * keep + batch_value * rate, stat.dtype))
        if reference is not None:
            latest = moments.moving_mean_update
            if seen is not None:
                # Where no group saw data there is no mean (the update is 0 over
                # groups): the next step keeps the last reference.
                latest = tf.where(seen, latest, previous)
            stored = self._step_reference.variable
            stored.assign(ops.cast(latest, stored.dtype))

        outputs = normalize(
            x,
            moments.mean,
            moments.variance,
            offset=ops.cast(self.beta, x.dtype) if self.center else None,
            scale=ops.cast(self.gamma, x.dtype) if self.scale else None,
            epsilon=self.epsilon,
            axis=axis,
        )
        return ops.cast(outputs, self.compute_dtype)

    def _moments(self, inputs, mask):
        # Keras' `call` asks for batch moments only where this layer needs no
        # synchronisation (`call` handles the rest). Keras' own `_moments` would
        # read `synchronized=True` and take its all-reduced `E[x^2] - E[x]^2`
        # path; here they are the local moments of plain batch normalisation.
        if mask is not None:
            return super()._moments(inputs, mask)  # Keras' masked moments never all-reduce.
        axis = self.axis % len(inputs.shape)
        axes = [i for i in range(len(inputs.shape)) if i != axis]
        return ops.moments(inputs, axes=axes, synchronized=False)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        for key in ("synchronized", "renorm", "renorm_clipping", "renorm_momentum"):
            config.pop(key, None)
        config["group_size"] = self.group_size
        config["exchange"] = self.exchange
        return config
