"""A training step on 4 replicas against the same model on one device (shared by the tests)."""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.layer_walk import all_layers
from tensorflow_similarity.testing import mirrored_strategy

# (sync_bn, replicas per batch-norm group) at 4 replicas, and their test ids.
SYNC_VARIANTS = [(False, 1), (True, 4), (GroupSyncBatchNorm(2), 2)]
SYNC_IDS = ["plain", "sync", "group2"]


def batch_norm_layers(model: keras.Model) -> list[keras.layers.BatchNormalization]:
    return [
        layer for layer in all_layers(model) if isinstance(layer, keras.layers.BatchNormalization)
    ]


def _without_dropout(model: keras.Model) -> None:
    # Dropout draws different masks on each replica and on the reference; BN is what is tested.
    for layer in all_layers(model):
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0


def assert_step_matches_single_device(
    build: Callable[[object], keras.Model],
    sync_bn: object,
    group_size: int,
    num_replicas: int = 4,
    per_replica: int = 2,
    gradients: bool = True,
    compiled: bool = True,
) -> None:
    """Checks outputs, moving statistics and gradients of one distributed training step.

    `build(sync_bn)` makes the model. It is built under a `num_replicas`
    MirroredStrategy and, with `sync_bn=False`, on one device, with the same
    weights. Each group of `group_size` replicas must behave as the reference
    model fed that group's concatenated batch: same outputs, and the gradients
    summed over replicas equal to the sum of the groups' reference gradients.
    Moving statistics: a plain batch-norm layer's replica copies each hold
    their own replica's update (Keras creates them with aggregation "none");
    a synchronised layer's copies all hold the mean of its groups' updates,
    as `tf.distribute` averages the assignment once the layer has issued its
    collective.
    The loss `sum(outputs * targets) / global_batch` gives every output a
    different weight. Runs in float64, so the tolerances separate a bug from
    rounding even through dozens of batch-norm layers.

    `compiled=False` runs both steps eagerly: `MirroredStrategy.run` then drives
    one thread per replica and the layers' collectives go through the same
    replica-context all-reduce, without tracing a graph of every replica. For
    ResNet-50 or EfficientNet-B0 at 4 replicas that is ~15 s instead of ~75 s
    (most of it graph construction and optimisation on 2 cores); the compiled
    path is exercised by the ResNet-18 and BackboneSim tests with the same
    layer classes.
    """
    maybe_compile = tf.function if compiled else (lambda function: function)
    keras.config.set_dtype_policy("float64")
    keras.utils.set_random_seed(0)
    strategy = mirrored_strategy(num_replicas)
    global_batch = num_replicas * per_replica
    with strategy.scope():
        model = build(sync_bn)
    reference = build(False)
    reference.set_weights(model.get_weights())
    _without_dropout(model)
    _without_dropout(reference)

    rng = np.random.default_rng(0)
    images = rng.uniform(0.0, 255.0, (global_batch, *model.input_shape[1:]))
    targets = rng.normal(size=(global_batch, *model.output_shape[1:]))

    def shard(array):
        return strategy.experimental_distribute_values_from_function(
            lambda ctx: array[
                ctx.replica_id_in_sync_group * per_replica : (ctx.replica_id_in_sync_group + 1)
                * per_replica
            ]
        )

    @maybe_compile
    def distributed_step(x, t):
        def replica_step(x, t):
            with tf.GradientTape() as tape:
                y = model(x, training=True)
                loss = tf.reduce_sum(y * t) / global_batch
            if not gradients:
                return y, []
            return y, tape.gradient(loss, model.trainable_variables)

        y, grads = strategy.run(replica_step, args=(x, t))
        summed = [strategy.reduce(tf.distribute.ReduceOp.SUM, g, axis=None) for g in grads]
        return strategy.experimental_local_results(y), summed

    outputs, grads = distributed_step(shard(images), shard(targets))
    outputs = np.concatenate([keras.ops.convert_to_numpy(y) for y in outputs])
    grads = [keras.ops.convert_to_numpy(g) for g in grads]

    @maybe_compile
    def reference_step(x, t):
        with tf.GradientTape() as tape:
            y = reference(x, training=True)
            loss = tf.reduce_sum(y * t) / global_batch
        if not gradients:
            return y, []
        return y, tape.gradient(loss, reference.trainable_variables)

    initial = reference.get_weights()
    group_batch = group_size * per_replica
    ref_outputs, ref_grads, ref_stats = [], None, []
    for start in range(0, global_batch, group_batch):
        reference.set_weights(initial)
        y, g = reference_step(
            images[start : start + group_batch], targets[start : start + group_batch]
        )
        ref_outputs.append(keras.ops.convert_to_numpy(y))
        g = [keras.ops.convert_to_numpy(v) for v in g]
        ref_grads = g if ref_grads is None else [a + b for a, b in zip(ref_grads, g, strict=True)]
        ref_stats.append(
            [
                (
                    keras.ops.convert_to_numpy(bn.moving_mean),
                    keras.ops.convert_to_numpy(bn.moving_variance),
                )
                for bn in batch_norm_layers(reference)
            ]
        )

    np.testing.assert_allclose(outputs, np.concatenate(ref_outputs), rtol=1e-9, atol=1e-9)

    assert len(grads) == len(ref_grads) == (len(reference.trainable_variables) if gradients else 0)
    scale = max((float(np.abs(g).max()) for g in ref_grads), default=0.0)
    checked = reference.trainable_variables if gradients else []
    for variable, grad, ref_grad in zip(checked, grads, ref_grads, strict=True):
        np.testing.assert_allclose(
            grad, ref_grad, rtol=1e-6, atol=1e-9 * scale, err_msg=f"gradient of {variable.path}"
        )

    for index, bn in enumerate(batch_norm_layers(model)):
        for stat_index, stat in enumerate((bn.moving_mean, bn.moving_variance)):
            copies = strategy.experimental_local_results(stat.value)
            assert len(copies) == num_replicas
            group_means = np.mean([stats[index][stat_index] for stats in ref_stats], axis=0)
            for replica, copy in enumerate(copies):
                if group_size == 1:
                    expected = ref_stats[replica][index][stat_index]
                else:
                    expected = group_means
                np.testing.assert_allclose(
                    keras.ops.convert_to_numpy(copy),
                    expected,
                    rtol=1e-9,
                    atol=1e-9,
                    err_msg=f"{stat.path} on replica {replica}",
                )
