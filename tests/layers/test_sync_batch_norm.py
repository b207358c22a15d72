"""SyncBatchNormalization vs plain BatchNormalization on one device holding the global batch."""

from __future__ import annotations

import re
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.layers import SyncBatchNormalization
from tensorflow_similarity.testing import (
    assert_config_round_trip,
    assert_layer_parity,
    count_collectives,
    mirrored_strategy,
    run_local_workers,
    run_on_replicas,
)

# Both ways of combining the replicas' statistics must be exact.
EXCHANGE_PATHS = ["reduce", "gather"]
RTOL = 1e-4
ATOL = 1e-4


def make_pair(shape, axis=-1, seed=0, **kwargs):
    """A built BatchNormalization and a SyncBatchNormalization with the same random state."""
    rng = np.random.default_rng(seed)
    ref = keras.layers.BatchNormalization(axis=axis, **kwargs)
    ref.build(shape)
    channels = shape[axis]
    values = {
        "gamma": rng.uniform(0.5, 1.5, channels),
        "beta": rng.normal(size=channels),
        "moving_mean": rng.normal(size=channels),
        "moving_variance": rng.uniform(0.5, 1.5, channels),
    }
    for name, value in values.items():
        if getattr(ref, name) is not None:
            getattr(ref, name).assign(value.astype("float32"))
    return ref, values


def build_sync(shape, values, strategy=None, axis=-1, **kwargs):
    def create():
        layer = SyncBatchNormalization(axis=axis, **kwargs)
        layer.build(shape)
        for name, value in values.items():
            if getattr(layer, name) is not None:
                getattr(layer, name).assign(value.astype("float32"))
        return layer

    if strategy is None:
        return create()
    with strategy.scope():
        return create()


def build_plain(shape, values, **kwargs):
    """Keras' BatchNormalization, built, holding `values`."""
    layer = keras.layers.BatchNormalization(**kwargs)
    layer.build(shape)
    for name, value in values.items():
        getattr(layer, name).assign(value.astype("float32"))
    return layer


def reference_step(layer, x, upstream, mask=None):
    """Single-device forward + gradients of sum(y * upstream) w.r.t. x, gamma, beta."""
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True, mask=None if mask is None else tf.constant(mask))
        loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
    grads = tape.gradient(loss, [x, *affine_params(layer)])
    return y.numpy(), [g.numpy() for g in grads]


def affine_params(layer):
    return [getattr(layer, name) for name in ("gamma", "beta") if getattr(layer, name) is not None]


def split(array, sizes):
    return np.split(array, np.cumsum(sizes)[:-1])


def distributed_step(layer, strategy, xs, upstreams, masks=None, unknown_batch=False):
    """Runs the same step on each replica with its own slice; returns concatenated results.

    With `unknown_batch`, the layer sees a batch dimension unknown at trace time
    (as in `fit` on a dataset with a partial last batch), not the static one.
    """

    def step(x, upstream, mask=None):
        with tf.GradientTape() as tape:
            tape.watch(x)
            inputs = x
            if unknown_batch:
                inputs = tf.compat.v1.placeholder_with_default(x, [None, *x.shape[1:]])
            y = layer(inputs, training=True, mask=mask)
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * upstream)
        return y, tape.gradient(loss, [x, *affine_params(layer)])

    inputs = [np.concatenate(xs), np.concatenate(upstreams)]
    if masks is not None:
        inputs.append(np.concatenate(masks))
    run = run_on_replicas(step, inputs, [len(x) for x in xs], strategy=strategy)
    y = run.concatenated(lambda result: result[0])
    dx = run.concatenated(lambda result: result[1][0])
    # The optimizer sums parameter gradients over replicas.
    dparams = run.summed(lambda result: result[1][1:])
    return y, [dx, *dparams], run.function


def assert_parity(sync, ref, y, grads, y_ref, grads_ref, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(y, y_ref, rtol=rtol, atol=atol, err_msg="outputs")
    assert len(grads) == len(grads_ref)
    for name, g, g_ref in zip(["dx", "dparam1", "dparam2"], grads, grads_ref, strict=False):
        np.testing.assert_allclose(g, g_ref, rtol=rtol, atol=atol, err_msg=name)
    np.testing.assert_allclose(
        sync.moving_mean.numpy(), ref.moving_mean.numpy(), rtol=rtol, atol=atol
    )
    np.testing.assert_allclose(
        sync.moving_variance.numpy(), ref.moving_variance.numpy(), rtol=rtol, atol=atol
    )


def check_parity(x, sizes, upstream, mask=None, axis=-1, exchange="auto", **kwargs):
    """`assert_layer_parity` of a SyncBatchNormalization against Keras' on one device."""
    _, values = make_pair(x.shape, axis=axis, **kwargs)
    return assert_layer_parity(
        lambda: build_sync(x.shape, values, axis=axis, exchange=exchange, **kwargs),
        x,
        sizes,
        upstream=upstream,
        mask=mask,
        reference_factory=lambda: make_pair(x.shape, axis=axis, **kwargs)[0],
        rtol=RTOL,
        atol=ATOL,
    )


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
@pytest.mark.parametrize("num_replicas", [1, 2, 4, 8])
def test_parity_with_single_device_global_batch(num_replicas, exchange):
    per_replica, shape = 3, (5, 4, 6)
    rng = np.random.default_rng(num_replicas)
    x = rng.normal(2.0, 3.0, size=(num_replicas * per_replica, *shape)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    sizes = [per_replica] * num_replicas
    parity = check_parity(x, sizes, upstream, momentum=0.7, exchange=exchange)
    # One packed all-reduce forward and one backward per replica; none with one replica.
    expected = 2 * num_replicas if num_replicas > 1 else 0
    assert count_collectives(parity.function) == expected


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
@pytest.mark.parametrize(
    "shape, axis",
    [
        ((6,), -1),  # 2-D
        ((5, 6), -1),  # 3-D
        ((6, 5), 1),  # 3-D channels-first
        ((6, 4, 5), 1),  # 4-D channels-first
        ((3, 4, 2, 6), -1),  # 5-D
        ((6, 3, 4, 2), 1),  # 5-D channels-first
    ],
)
def test_parity_any_rank_and_axis(shape, axis, exchange):
    num_replicas, per_replica = 4, 2
    rng = np.random.default_rng(1)
    x = rng.normal(-1.0, 2.0, size=(num_replicas * per_replica, *shape)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    sizes = [per_replica] * num_replicas
    check_parity(x, sizes, upstream, axis=axis, momentum=0.5, epsilon=1e-2, exchange=exchange)


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
@pytest.mark.parametrize("center, scale", [(False, True), (True, False), (False, False)])
def test_parity_without_center_or_scale(center, scale, exchange):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 3, 4)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    check_parity(x, [4, 4], upstream, center=center, scale=scale, exchange=exchange)


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
@pytest.mark.parametrize("ratio", [0.0, 1e2, 1e3, 1e4])
def test_variance_is_robust_to_large_means(ratio, exchange):
    """Relative error of the batch variance against float64 stays below 1e-3.

    The standard deviations span four decades, so the moving variance (1 at
    the start) is replaced by values 1e4 times smaller or larger: the update
    itself must not cancel.
    """
    num_replicas, per_replica, channels = 4, 16, 8
    rng = np.random.default_rng(3)
    std = rng.permutation(np.logspace(-2, 2, channels))
    x = (ratio * std + std * rng.normal(size=(num_replicas * per_replica, 7, channels))).astype(
        "float32"
    )
    expected = x.astype("float64").reshape(-1, channels).var(axis=0)
    strategy = mirrored_strategy(num_replicas)
    sync = build_sync(x.shape, {}, strategy, momentum=0.0, exchange=exchange)
    sizes = [per_replica] * num_replicas
    distributed_step(sync, strategy, split(x, sizes), split(np.ones_like(x), sizes))
    got = sync.moving_variance.numpy().astype("float64")
    # The issue asks for 1e-3; the shifted merge keeps it near float32 rounding.
    np.testing.assert_array_less(np.abs(got - expected) / expected, 1e-5)
    expected_mean = x.astype("float64").reshape(-1, channels).mean(axis=0)
    np.testing.assert_allclose(sync.moving_mean.numpy(), expected_mean, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
def test_unequal_and_empty_replica_batches(exchange):
    sizes = [3, 5, 0, 2]
    rng = np.random.default_rng(4)
    x = rng.normal(1.0, 2.0, size=(sum(sizes), 4, 5)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    parity = check_parity(x, sizes, upstream, momentum=0.6, exchange=exchange)
    assert np.all(np.isfinite(parity.outputs))
    assert all(np.all(np.isfinite(g)) for g in parity.gradients)


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
def test_unknown_batch_dimension_counts_at_run_time(exchange):
    """Static shapes are counted at trace time; an unknown batch is counted when run."""
    sizes = [3, 0, 2, 5]
    rng = np.random.default_rng(14)
    x = rng.normal(-2.0, 0.5, size=(sum(sizes), 3, 4)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    ref, values = make_pair(x.shape, momentum=0.4)
    y_ref, grads_ref = reference_step(ref, x, upstream)
    strategy = mirrored_strategy(4)
    sync = build_sync(x.shape, values, strategy, momentum=0.4, exchange=exchange)
    y, grads, _ = distributed_step(
        sync, strategy, split(x, sizes), split(upstream, sizes), unknown_batch=True
    )
    assert_parity(sync, ref, y, grads, y_ref, grads_ref)


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
def test_empty_global_batch_keeps_moving_statistics(exchange):
    shape = (0, 4, 5)
    _, values = make_pair((1, 4, 5))
    strategy = mirrored_strategy(2)
    sync = build_sync(shape, values, strategy, exchange=exchange)
    empty = np.zeros(shape, "float32")
    y, grads, _ = distributed_step(sync, strategy, [empty, empty], [empty, empty])
    assert y.shape == shape
    np.testing.assert_array_equal(sync.moving_mean.numpy(), values["moving_mean"].astype("float32"))
    np.testing.assert_array_equal(
        sync.moving_variance.numpy(), values["moving_variance"].astype("float32")
    )
    assert all(np.all(np.isfinite(g)) for g in grads)


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
def test_mask_counts_only_unmasked_positions_across_replicas(exchange):
    rng = np.random.default_rng(5)
    x = rng.normal(3.0, 2.0, size=(8, 6, 5)).astype("float32")
    mask = rng.uniform(size=(8, 6)) > 0.4
    mask[2] = False  # a sample with no unmasked step
    upstream = rng.normal(size=x.shape).astype("float32")
    _, values = make_pair(x.shape, momentum=0.5)
    parity = check_parity(x, [4, 4], upstream, mask=mask, momentum=0.5, exchange=exchange)
    # The mask changes the statistics: without it the moving mean would differ.
    unmasked_mean = x.reshape(-1, 5).mean(axis=0)
    assert not np.allclose(
        parity.moving["moving_mean"], 0.5 * values["moving_mean"] + 0.5 * unmasked_mean
    )


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_statistics_in_float32(policy, exchange):
    rng = np.random.default_rng(6)
    x = rng.normal(4.0, 2.0, size=(8, 3, 5)).astype("float32")
    compute_dtype = "float16" if policy == "mixed_float16" else "bfloat16"
    x_low = tf.cast(x, compute_dtype).numpy()
    upstream = rng.normal(size=x.shape).astype("float32")
    ref, values = make_pair(x.shape, momentum=0.5)
    # Reference in float32 on the same (rounded) inputs.
    y_ref, grads_ref = reference_step(ref, x_low.astype("float32"), upstream)
    strategy = mirrored_strategy(2)
    sync = build_sync(x.shape, values, strategy, momentum=0.5, dtype=policy, exchange=exchange)
    y, grads, _ = distributed_step(sync, strategy, split(x_low, [4, 4]), split(upstream, [4, 4]))
    assert y.dtype == np.dtype(compute_dtype) or str(y.dtype) == compute_dtype
    assert sync.moving_mean.dtype == "float32"
    tol = 1e-2 if compute_dtype == "float16" else 5e-2
    np.testing.assert_allclose(y.astype("float32"), y_ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(
        sync.moving_mean.numpy(), ref.moving_mean.numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        sync.moving_variance.numpy(), ref.moving_variance.numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(grads[1], grads_ref[1], rtol=tol, atol=tol * 10)


def test_bfloat16_results_are_not_clipped_to_float16_range():
    x = np.random.default_rng(7).normal(size=(4, 3)).astype("float32")
    strategy = mirrored_strategy(2)
    sync = build_sync(x.shape, {"beta": np.full(3, 1e6)}, strategy, dtype="mixed_bfloat16")
    y, _, _ = distributed_step(
        sync,
        strategy,
        split(tf.cast(x, "bfloat16").numpy(), [2, 2]),
        split(np.ones_like(x), [2, 2]),
    )
    assert np.all(y.astype("float32") > 9e5)


def test_plain_behaviour_without_strategy_is_bit_identical():
    rng = np.random.default_rng(8)
    x = rng.normal(size=(6, 4, 3)).astype("float32")
    ref, values = make_pair(x.shape)
    sync = build_sync(x.shape, values)
    for training in (True, False):
        np.testing.assert_array_equal(
            sync(x, training=training).numpy(), ref(x, training=training).numpy()
        )
    np.testing.assert_array_equal(sync.moving_mean.numpy(), ref.moving_mean.numpy())


@pytest.mark.parametrize(
    "shape, axis, masked",
    [((6, 4, 3), -1, False), ((6, 4, 3), -1, True), ((6, 3, 4, 2), 1, False)],
    ids=["channels_last", "masked", "channels_first"],
)
def test_one_replica_training_is_plain_batch_norm(shape, axis, masked):
    """One replica needs no synchronisation: Keras' local moments, not its all-reduced ones.

    `synchronized` reads `True` for Keras too, so this pins that the layer keeps
    Keras' `synchronized=True` path (three all-reduces, `E[x^2] - E[x]^2`) off.
    """
    rng = np.random.default_rng(11)
    x = rng.normal(5.0, 2.0, size=shape).astype("float32")
    upstream = rng.normal(size=shape).astype("float32")
    mask = rng.uniform(size=shape[:-1]) > 0.3 if masked else None
    _, values = make_pair(shape, axis=axis)
    strategy = mirrored_strategy(1)
    masks = None if mask is None else [mask]
    with strategy.scope():
        ref = keras.layers.BatchNormalization(axis=axis, momentum=0.7)
        ref.build(shape)
        for name, value in values.items():
            getattr(ref, name).assign(value.astype("float32"))
    y_ref, grads_ref, _ = distributed_step(ref, strategy, [x], [upstream], masks)
    sync = build_sync(shape, values, strategy, axis=axis, momentum=0.7)
    y, grads, traced = distributed_step(sync, strategy, [x], [upstream], masks)
    assert count_collectives(traced) == 0
    np.testing.assert_array_equal(y, y_ref)
    for g, g_ref in zip(grads, grads_ref, strict=True):
        np.testing.assert_array_equal(g, g_ref)
    np.testing.assert_array_equal(sync.moving_mean.numpy(), ref.moving_mean.numpy())
    np.testing.assert_array_equal(sync.moving_variance.numpy(), ref.moving_variance.numpy())


@pytest.mark.parametrize("argument", [{}, {"synchronized": False}, {"synchronized": True}])
def test_synchronized_reads_true_and_stays_out_of_the_config(argument):
    layer = SyncBatchNormalization(**argument)
    assert layer.synchronized is True
    x = np.random.default_rng(12).normal(size=(4, 3)).astype("float32")
    layer(x, training=True)
    assert layer.synchronized is True
    config = layer.get_config()
    assert "synchronized" not in config
    assert SyncBatchNormalization.from_config({**config, **argument}).synchronized is True


@pytest.mark.parametrize("mode", ["inference", "frozen", "cross_replica"])
def test_no_collective_outside_synchronised_training(mode):
    rng = np.random.default_rng(9)
    x = rng.normal(size=(4, 3, 5)).astype("float32")
    ref, values = make_pair(x.shape)
    strategy = mirrored_strategy(2)
    sync = build_sync(x.shape, values, strategy)
    if mode == "cross_replica":
        with strategy.scope():
            np.testing.assert_array_equal(
                sync(x, training=True).numpy(), ref(x, training=True).numpy()
            )
        return
    training = mode != "inference"
    if mode == "frozen":
        sync.trainable = False
        ref.trainable = False
    run = run_on_replicas(lambda x: sync(x, training=training), x, [2, 2], strategy=strategy)
    assert count_collectives(run.function) == 0
    got = run.concatenated()
    np.testing.assert_allclose(got, ref(x, training=training).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
def test_group_size_matches_per_group_single_device_reference(exchange):
    num_replicas, group_size, per_replica = 4, 2, 3
    rng = np.random.default_rng(10)
    x = rng.normal(1.0, 2.0, size=(num_replicas * per_replica, 4, 5)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    strategy = mirrored_strategy(num_replicas)
    _, values = make_pair(x.shape, momentum=0.5)
    sync = build_sync(
        x.shape, values, strategy, momentum=0.5, group_size=group_size, exchange=exchange
    )
    sizes = [per_replica] * num_replicas
    y, grads, fn = distributed_step(sync, strategy, split(x, sizes), split(upstream, sizes))

    group_rows = per_replica * group_size
    refs, dgamma, dbeta = [], 0.0, 0.0
    for start in range(0, len(x), group_rows):
        ref, _ = make_pair(x.shape, momentum=0.5)
        y_ref, (dx_ref, dg, db) = reference_step(
            ref, x[start : start + group_rows], upstream[start : start + group_rows]
        )
        np.testing.assert_allclose(y[start : start + group_rows], y_ref, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(
            grads[0][start : start + group_rows], dx_ref, rtol=RTOL, atol=ATOL
        )
        dgamma, dbeta = dgamma + dg, dbeta + db
        refs.append(ref)
    np.testing.assert_allclose(grads[1], dgamma, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(grads[2], dbeta, rtol=RTOL, atol=ATOL)
    # Moving statistics aggregate with MEAN across replicas: the mean of the groups'.
    for stat in ("moving_mean", "moving_variance"):
        expected = np.mean([getattr(r, stat).numpy() for r in refs], axis=0)
        np.testing.assert_allclose(getattr(sync, stat).numpy(), expected, rtol=RTOL, atol=ATOL)
    assert count_collectives(fn) == 2 * num_replicas


def test_group_size_must_divide_replicas():
    strategy = mirrored_strategy(4)
    sync = build_sync((8, 3), {}, strategy, group_size=3)
    x = np.ones((8, 3), "float32")
    with pytest.raises(ValueError, match="group_size=3 does not divide the 4 replicas"):
        distributed_step(sync, strategy, split(x, [2] * 4), split(x, [2] * 4))


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_invalid_group_size_rejected_at_construction(bad):
    with pytest.raises(ValueError, match="group_size must be None"):
        SyncBatchNormalization(group_size=bad)


def test_renorm_rejected():
    with pytest.raises(ValueError, match="renorm"):
        SyncBatchNormalization(renorm=True)


def test_config_round_trip():
    layer = SyncBatchNormalization(
        axis=1, momentum=0.9, epsilon=1e-5, center=False, group_size=2, name="bn"
    )
    config = layer.get_config()
    assert config["group_size"] == 2 and "synchronized" not in config
    x = np.random.default_rng(0).normal(size=(4, 6, 3)).astype("float32")
    assert_config_round_trip(layer, x, training=True)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(restored, SyncBatchNormalization) and restored.get_config() == config


@pytest.mark.parametrize("in_scope", [False, True])
def test_keras_file_round_trip(tmp_path, in_scope):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(4, 6)).astype("float32")
    strategy = mirrored_strategy(2)

    def build():
        model = keras.Sequential(
            [keras.Input((6,)), keras.layers.Dense(5), SyncBatchNormalization(group_size=2)]
        )
        model.layers[-1].moving_mean.assign(rng.normal(size=5).astype("float32"))
        return model

    path = tmp_path / "model.keras"
    if in_scope:
        with strategy.scope():
            model = build()
            model.save(path)
            loaded = keras.saving.load_model(path)
    else:
        model = build()
        model.save(path)
        loaded = keras.saving.load_model(path)
    assert isinstance(loaded.layers[-1], SyncBatchNormalization)
    assert loaded.layers[-1].group_size == 2
    np.testing.assert_array_equal(
        loaded(x, training=False).numpy(), model(x, training=False).numpy()
    )


@pytest.mark.slow
def test_multi_worker_mirrored_strategy_matches_single_device(tmp_path):
    from pathlib import Path

    sizes = [3, 5]
    script = Path(__file__).with_name("mwms_sync_bn_worker.py")
    run_local_workers(script, len(sizes), [str(tmp_path), ",".join(map(str, sizes))], timeout=240)

    rng = np.random.default_rng(0)
    x = rng.normal(1.5, 2.0, size=(sum(sizes), 4, 5)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    gamma = rng.uniform(0.5, 1.5, 5).astype("float32")
    beta = rng.normal(size=5).astype("float32")
    ref = keras.layers.BatchNormalization(momentum=0.5)
    ref.build(x.shape)
    ref.gamma.assign(gamma)
    ref.beta.assign(beta)
    y_ref, (dx_ref, dgamma_ref, dbeta_ref) = reference_step(ref, x, upstream)

    starts = np.cumsum([0, *sizes])
    for task in range(len(sizes)):
        got = np.load(tmp_path / f"worker{task}.npz")
        rows = slice(starts[task], starts[task + 1])
        np.testing.assert_allclose(got["y"], y_ref[rows], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(got["dx"], dx_ref[rows], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(got["dgamma"], dgamma_ref, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(got["dbeta"], dbeta_ref, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(
            got["moving_mean"], ref.moving_mean.numpy(), rtol=RTOL, atol=ATOL
        )
        np.testing.assert_allclose(
            got["moving_variance"], ref.moving_variance.numpy(), rtol=RTOL, atol=ATOL
        )


def collective_payloads(concrete_function) -> set[tuple[str, int]]:
    """The (dtype, number of values) of every all-reduce in a traced step."""
    payloads = set()
    for op in concrete_function.graph.get_operations():
        if op.type.startswith("CollectiveReduce"):
            tensor = op.inputs[0]
            payloads.add((tensor.dtype.name, int(np.prod(tensor.shape))))
    return payloads


@pytest.mark.parametrize("num_replicas", [2, 4, 8])
def test_reduce_exchange_is_constant_in_the_number_of_replicas(num_replicas):
    """Forward: 2C+1 float64 values ("reduce") vs 4CK float32 ("gather"); backward: 2C."""
    channels, per_replica = 5, 3
    rng = np.random.default_rng(11)
    x = rng.normal(size=(num_replicas * per_replica, 4, channels)).astype("float32")
    strategy = mirrored_strategy(num_replicas)
    sizes = [per_replica] * num_replicas
    found = {}
    for exchange in ("auto", *EXCHANGE_PATHS):
        sync = build_sync(x.shape, {}, strategy, exchange=exchange)
        _, _, function = distributed_step(sync, strategy, split(x, sizes), split(x, sizes))
        found[exchange] = collective_payloads(function)
    backward = ("float32", 2 * channels)
    assert found["reduce"] == {("float64", 2 * channels + 1), backward}
    assert found["gather"] == {("float32", 4 * channels * num_replicas), backward}
    # The default, off TPU, is the float64 reduce.
    assert found["auto"] == found["reduce"]


def test_reduce_exchange_is_exact_far_from_the_moving_mean():
    """The float64 re-centring on the moving mean keeps the variance at float32 rounding.

    The error bound of the merge is about 1e-16 (|mean - moving mean| / std)^2 in
    relative terms; here the moving mean is 1e4 standard deviations away, on
    both sides, and the error stays under the 1e-5 of the gather path.
    """
    num_replicas, per_replica, channels = 4, 16, 6
    rng = np.random.default_rng(12)
    std = rng.uniform(0.5, 2.0, channels)
    mean = 50.0 * std
    x = (mean + std * rng.normal(size=(num_replicas * per_replica, 3, channels))).astype("float32")
    expected = x.astype("float64").reshape(-1, channels).var(axis=0)
    strategy = mirrored_strategy(num_replicas)
    moving_mean = (mean + 1e4 * std * np.where(np.arange(channels) % 2, 1.0, -1.0)).astype(
        "float32"
    )
    sync = build_sync(
        x.shape, {"moving_mean": moving_mean}, strategy, momentum=0.0, exchange="reduce"
    )
    sizes = [per_replica] * num_replicas
    distributed_step(sync, strategy, split(x, sizes), split(np.ones_like(x), sizes))
    got = sync.moving_variance.numpy().astype("float64")
    np.testing.assert_array_less(np.abs(got - expected) / expected, 1e-5)


@pytest.mark.parametrize("exchange", ["all", "", None, 1])
def test_unknown_exchange_is_rejected(exchange):
    with pytest.raises(ValueError, match="exchange must be one of"):
        SyncBatchNormalization(exchange=exchange)


MOMENTUM = r"a finite number in \[0, 1\]"
EPSILON = r"a finite number > 0"


@pytest.mark.parametrize(
    ("argument", "value", "wanted"),
    [
        ("momentum", 2, MOMENTUM),
        ("momentum", -1, MOMENTUM),
        ("momentum", 1.0001, MOMENTUM),
        ("momentum", float("nan"), MOMENTUM),
        ("momentum", float("inf"), MOMENTUM),
        ("momentum", "0.9", MOMENTUM),
        ("momentum", None, MOMENTUM),
        ("momentum", True, MOMENTUM),
        ("epsilon", -1, EPSILON),
        ("epsilon", 0, EPSILON),
        ("epsilon", 0.0, EPSILON),
        ("epsilon", float("nan"), EPSILON),
        ("epsilon", float("inf"), EPSILON),
        ("epsilon", "1e-3", EPSILON),
        ("epsilon", [1e-3], EPSILON),
        ("axis", 1.5, "an integer"),
        ("axis", "1", "an integer"),
        ("axis", True, "an integer"),
    ],
)
def test_invalid_settings_rejected_at_construction(argument, value, wanted):
    # The layer, the argument, the valid range, the value received, then what to do.
    expected = (
        rf"^SyncBatchNormalization 'bn': {argument} must be {wanted}\. "
        rf"Received: {argument}={re.escape(repr(value))}\. (Use|The|It) "
    )
    with pytest.raises(ValueError, match=expected):
        SyncBatchNormalization(name="bn", **{argument: value})


@pytest.mark.parametrize(("momentum", "epsilon"), [(0, 1e-12), (1, 1e-3), (0.5, 10.0)])
def test_boundary_settings_accepted_and_round_trip(momentum, epsilon):
    layer = SyncBatchNormalization(axis=-3, momentum=momentum, epsilon=epsilon)
    layer.build((2, 3, 4, 5))
    config = layer.get_config()

    assert (config["axis"], config["momentum"], config["epsilon"]) == (-3, momentum, epsilon)
    assert SyncBatchNormalization.from_config(config).get_config() == config


@pytest.mark.parametrize("axis", [4, 5, -5, -7])
def test_axis_outside_the_input_rank_rejected_at_build(axis):
    layer = SyncBatchNormalization(axis=axis, name="bn")
    with pytest.raises(
        ValueError, match=rf"'bn': axis={axis} is out of range for an input of rank 4 .*\[-4, 3\]"
    ):
        layer.build((2, 3, 4, 5))
    assert not layer.built


def test_axis_outside_the_input_rank_rejected_in_a_model():
    with pytest.raises(ValueError, match="axis=3 is out of range for an input of rank 3"):
        keras.Sequential([keras.Input((4, 5)), SyncBatchNormalization(axis=3)])


@pytest.mark.parametrize("axis", [-4, -3, -1, 0, 1, 3])
def test_every_axis_within_the_rank_matches_plain_batch_norm(axis):
    # Negative axes count from the end, as in Keras: `axis` and `axis % rank`
    # normalise the same features.
    x = np.random.default_rng(3).normal(size=(2, 3, 4, 5)).astype("float32")
    sync = SyncBatchNormalization(axis=axis)
    plain = keras.layers.BatchNormalization(axis=axis)

    np.testing.assert_allclose(
        sync(x, training=True).numpy(), plain(x, training=True).numpy(), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
def test_masked_inputs_far_from_zero_keep_the_variance_of_unmasked_ones(exchange):
    """A mean 1e4 standard deviations from 0: masked statistics shift by the masked mean."""
    rng = np.random.default_rng(13)
    channels = 4
    std = rng.uniform(0.5, 2.0, channels)
    x = (1e4 * std + std * rng.normal(size=(8, 6, channels))).astype("float32")
    mask = rng.uniform(size=(8, 6)) > 0.4
    x[~mask] = -3e4  # padding far from the data, on the other side of zero
    kept = x[mask].astype("float64")
    strategy = mirrored_strategy(2)
    sizes = [4, 4]
    errors = {}
    for masked in (True, False):
        data = x if masked else kept.astype("float32").reshape(-1, 1, channels)
        sync = build_sync(data.shape, {}, strategy, momentum=0.0, exchange=exchange)
        split_sizes = sizes if masked else [len(kept) // 2, len(kept) - len(kept) // 2]
        distributed_step(
            sync,
            strategy,
            split(data, split_sizes),
            split(np.ones_like(data), split_sizes),
            split(mask, sizes) if masked else None,
        )
        got = sync.moving_variance.numpy().astype("float64")
        errors[masked] = np.max(np.abs(got - kept.var(axis=0)) / kept.var(axis=0))
    assert errors[False] < 1e-4
    assert errors[True] < 1e-4


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
@pytest.mark.parametrize("moving_mean", [[np.nan, 0.0], [np.inf, -np.inf]], ids=["nan", "inf"])
def test_non_finite_moving_mean_leaves_training_outputs_finite(moving_mean, exchange):
    """Training uses the batch statistics: a NaN or infinite moving mean must not reach them.

    Keras' layer (and `"gather"`) give finite outputs; the moving mean stays
    non-finite in both, as Keras' update makes it.
    """
    x = np.array([[1, 2], [3, 5], [0, 1], [2, 4]], "float32")
    upstream = np.arange(8, dtype="float32").reshape(4, 2) - 3.0
    values = {"moving_mean": np.array(moving_mean), "moving_variance": np.array([1.0, 2.0])}
    y_ref, _ = reference_step(build_plain(x.shape, values, momentum=0.5), x, upstream)
    column = x[:, 0].astype("float64")
    expected = (column - column.mean()) / np.sqrt(column.var() + 1e-3)
    np.testing.assert_allclose(y_ref[:, 0], expected, rtol=1e-5)  # the Keras reference is sane
    parity = assert_layer_parity(
        lambda: build_sync(x.shape, values, momentum=0.5, exchange=exchange),
        x,
        [2, 2],
        upstream=upstream,
        reference_factory=lambda: build_plain(x.shape, values, momentum=0.5),
        rtol=RTOL,
        atol=ATOL,
    )
    assert np.all(np.isfinite(parity.outputs))
    assert all(np.all(np.isfinite(g)) for g in parity.gradients)


def masked_reference(x, mask):
    """float64 mean and variance of the positions whose mask is non-zero, with plain loops."""
    channels = x.shape[-1]
    rows = x.reshape(-1, channels).astype("float64")
    keep = mask.reshape(-1) != 0
    mean, variance = np.zeros(channels), np.zeros(channels)
    for c in range(channels):
        kept = [rows[i, c] for i in range(len(rows)) if keep[i]]
        mean[c] = sum(kept) / len(kept)
        variance[c] = sum((v - mean[c]) ** 2 for v in kept) / len(kept)
    return mean, variance


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
@pytest.mark.parametrize("fill", [2.0, "mixed"])
def test_mask_values_other_than_one_select_as_in_keras(fill, exchange):
    """Keras counts every non-zero mask value as one selected position, never as a weight."""
    rng = np.random.default_rng(15)
    x = rng.normal(2.0, 3.0, size=(4, 3, 2)).astype("float32")
    if fill == "mixed":
        mask = rng.choice(np.array([0.0, 2.0, 0.5, -1.0, 1.0], "float32"), size=(4, 3))
        mask[0, 0] = 0.0
    else:
        mask = np.full((4, 3), fill, "float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    ref, _ = make_pair(x.shape, momentum=0.0)
    reference_step(ref, x, upstream, mask=mask)
    mean, variance = masked_reference(x, mask)
    np.testing.assert_allclose(ref.moving_variance.numpy(), variance, rtol=1e-5)
    parity = check_parity(x, [2, 2], upstream, mask=mask, momentum=0.0, exchange=exchange)
    np.testing.assert_allclose(parity.moving["moving_mean"], mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(parity.moving["moving_variance"], variance, rtol=1e-5)


@pytest.mark.parametrize("exchange", EXCHANGE_PATHS)
def test_masked_non_finite_padding_is_left_out_as_in_keras(exchange):
    """Keras selects with the mask: masked NaN or infinite padding never reaches the statistics."""
    rng = np.random.default_rng(16)
    x = rng.normal(1.0, 2.0, size=(4, 3, 2)).astype("float32")
    mask = np.ones((4, 3), bool)
    mask[1, 2] = mask[3, 0] = False
    x[1, 2] = np.inf
    x[3, 0] = np.nan
    ref, values = make_pair(x.shape, momentum=0.0)
    ref(x, training=True, mask=mask)
    strategy = mirrored_strategy(2)
    sync = build_sync(x.shape, values, strategy, momentum=0.0, exchange=exchange)
    y, _, _ = distributed_step(
        sync, strategy, split(x, [2, 2]), split(np.ones_like(x), [2, 2]), split(mask, [2, 2])
    )
    mean, variance = masked_reference(x, mask)
    np.testing.assert_allclose(sync.moving_mean.numpy(), mean, rtol=1e-5)
    np.testing.assert_allclose(sync.moving_variance.numpy(), variance, rtol=1e-5)
    np.testing.assert_allclose(sync.moving_variance.numpy(), ref.moving_variance.numpy(), rtol=1e-5)
    assert np.all(np.isfinite(y[mask]))


def group_variances_with_loops(x, sizes, group_size):
    """float64 variance of each channel over each group of replicas' rows, with plain loops."""
    bounds = np.cumsum([0, *sizes])
    groups = []
    for first in range(0, len(sizes), group_size):
        rows = x[bounds[first] : bounds[first + group_size]]
        variances = []
        for c in range(x.shape[1]):
            values = [float(v) for v in rows[:, c]]
            mean = sum(values) / len(values)
            variances.append(sum((v - mean) ** 2 for v in values) / len(values))
        groups.append(variances)
    return np.array(groups)


def batch_statistics_by_step(sync, batches, sizes, strategy):
    """Each training step's batch (mean, variance), from a momentum-0.5 layer's moving ones.

    `sizes` are the replicas' rows of every batch, or one list per batch.
    """
    sizes_by_step = sizes if isinstance(sizes[0], list) else [sizes] * len(batches)
    moving = [(sync.moving_mean.numpy(), sync.moving_variance.numpy())]
    for x, split_sizes in zip(batches, sizes_by_step, strict=True):
        run_on_replicas(lambda x: sync(x, training=True), x, split_sizes, strategy=strategy)
        moving.append((sync.moving_mean.numpy(), sync.moving_variance.numpy()))
    # moving = 0.5 old + 0.5 batch
    return [
        tuple(2.0 * n - o for n, o in zip(new, old, strict=True))
        for old, new in zip(moving, moving[1:], strict=False)
    ]


@pytest.mark.parametrize("offset", [1e6, 1e8])
def test_float64_variance_far_from_the_moving_mean_within_the_documented_error(offset):
    """`"gather"`: float64-exact anywhere. `"reduce"`: within `1e-15 (offset / std)^2` on the
    first step, float64-exact from the second.

    The docstring's range: the first step's float64 sums are centred on the
    moving mean (0 here), so their cancellation grows with the square of the
    distance to it, in standard deviations; the next step's are centred on the
    first step's global mean.
    """
    batches = [
        offset + np.array([[1.0, 2.0], [2.0, 4.0], [1.0, 3.0], [0.0, 1.0]]),
        offset + np.array([[3.0, 0.0], [2.0, 6.0], [1.5, 3.0], [0.0, 2.0]]),
    ]
    expected = [np.array([np.var(column) for column in x.T]) for x in batches]
    ratio = offset / np.sqrt(expected[0])
    strategy = mirrored_strategy(2)
    for exchange, first_bound in (
        ("gather", np.full_like(ratio, 1e-12)),
        ("reduce", 1e-15 * ratio**2),
    ):
        with strategy.scope():
            sync = SyncBatchNormalization(momentum=0.5, dtype="float64", exchange=exchange)
            sync.build((None, 2))
        steps = batch_statistics_by_step(sync, batches, [2, 2], strategy)
        for step, bound in ((0, first_bound), (1, 1e-12)):
            mean, variance = steps[step]
            error = np.abs(variance - expected[step]) / expected[step]
            np.testing.assert_array_less(error, bound, err_msg=f"{exchange}, step {step + 1}")
            np.testing.assert_allclose(mean, batches[step].mean(axis=0), rtol=1e-14)


@pytest.mark.parametrize(
    ("sizes", "group_size"), [([2, 4], None), ([1, 2, 2, 1], 2)], ids=["global", "groups"]
)
def test_reduce_is_float64_exact_from_the_second_step_far_from_the_moving_mean(sizes, group_size):
    """From the second training step `"reduce"` centres on the previous step's global mean.

    A fresh layer's moving mean is 0, 1e8 standard deviations from the data, and
    with momentum 0.5 it stays 5e7 away after the first step: the first step is
    centred on it (see the next test); the second step's variance is the
    one-device float64 variance.
    """
    rng = np.random.default_rng(21)
    batches = [1e8 + rng.normal(size=(sum(sizes), 2)) * [1.0, 3.0] for _ in range(2)]
    strategy = mirrored_strategy(len(sizes))
    with strategy.scope():
        sync = SyncBatchNormalization(
            momentum=0.5, dtype="float64", exchange="reduce", group_size=group_size
        )
        sync.build((None, 2))
    steps = batch_statistics_by_step(sync, batches, sizes, strategy)
    groups = group_variances_with_loops(batches[1], sizes, group_size or len(sizes))
    # The moving variance absorbs the mean of the groups' variances.
    np.testing.assert_allclose(steps[1][1], groups.mean(axis=0), rtol=1e-12)


def test_first_step_is_centred_on_the_moving_mean():
    """Before any training step (or after loading) `"reduce"` centres on the moving mean."""
    rng = np.random.default_rng(22)
    x = 1e8 + rng.normal(size=(6, 2)) * [1.0, 3.0]
    strategy = mirrored_strategy(2)
    with strategy.scope():
        sync = SyncBatchNormalization(momentum=0.5, dtype="float64", exchange="reduce")
        sync.build((None, 2))
    sync.moving_mean.assign([1e8 + 2.0, 1e8 - 5.0])
    ((_, variance),) = batch_statistics_by_step(sync, [x], [4, 2], strategy)
    expected = group_variances_with_loops(x, [6], 1)[0]
    np.testing.assert_allclose(variance, expected, rtol=1e-12)


@pytest.mark.parametrize("group_size", [None, 2], ids=["global", "groups"])
def test_empty_global_batch_keeps_the_previous_reference(group_size):
    """A step without data has no mean: the next step is centred on the last one that had."""
    rng = np.random.default_rng(23)
    batches = [1e8 + rng.normal(size=(n, 2)) for n in (6, 0, 6)]
    strategy = mirrored_strategy(4)
    with strategy.scope():
        sync = SyncBatchNormalization(
            momentum=0.5, dtype="float64", exchange="reduce", group_size=group_size
        )
        sync.build((None, 2))
    sizes = [[2, 1, 1, 2], [0, 0, 0, 0], [1, 2, 2, 1]]
    steps = batch_statistics_by_step(sync, batches, sizes, strategy)
    groups = group_variances_with_loops(batches[2], sizes[2], group_size or 4)
    np.testing.assert_allclose(steps[2][1], groups.mean(axis=0), rtol=1e-12)


BATCH_NORM_WEIGHTS = ["gamma", "beta", "moving_mean", "moving_variance"]
# Saved by the layer before it kept the previous step's mean (commit 32c6c67).
SAVED_BEFORE_REFERENCE = Path(__file__).with_name("data") / "sync_bn_saved_before_reference.keras"


def test_weights_are_those_of_keras_batch_norm_after_training(tmp_path):
    """The reference is no weight: weight lists and checkpoints are those of Keras' layer."""
    strategy = mirrored_strategy(2)
    with strategy.scope():
        sync = SyncBatchNormalization(momentum=0.5)
        sync.build((None, 3))
    run_on_replicas(lambda x: sync(x, training=True), np.ones((4, 3), "float32"), [2, 2])
    plain = keras.layers.BatchNormalization()
    plain.build((None, 3))
    assert [w.name for w in sync.weights] == [w.name for w in plain.weights]
    assert [w.name for w in sync.weights] == BATCH_NORM_WEIGHTS
    plain.set_weights(sync.get_weights())
    sync.set_weights(plain.get_weights())
    saved = [
        tf.train.Checkpoint(layer=layer).write(str(tmp_path / name))
        for name, layer in (("sync", sync), ("plain", plain))
    ]
    names = [[name for name, _ in tf.train.list_variables(path)] for path in saved]
    assert names[0] == names[1]
    tf.train.Checkpoint(layer=sync).read(saved[1]).assert_existing_objects_matched()


@pytest.mark.parametrize("saved", ["now", "before_reference"])
def test_keras_file_round_trip_then_training_starts_from_the_moving_mean(tmp_path, saved):
    """A loaded layer has the saved weights and trains as a new layer holding them would.

    The previous step's mean is not saved: after loading (a model, or weights
    into a trained layer), the first step is centred on the moving mean. A file
    saved before the layer kept that mean loads unchanged.
    """
    rng = np.random.default_rng(24)
    strategy = mirrored_strategy(2)

    def model_with_layer():
        return keras.Sequential(
            [keras.Input((3,)), SyncBatchNormalization(momentum=0.5, name="bn")],
            name="saved_before_reference",
        )

    def train_step(model, x):
        layer = model.get_layer("bn")
        return run_on_replicas(lambda x: layer(x, training=True), x, [2, 2], strategy=strategy)

    x = (1e4 + rng.normal(size=(4, 3))).astype("float32")
    path = SAVED_BEFORE_REFERENCE
    expected = [
        np.array(v, "float32")
        for v in ([1.5, 0.5, 2.0], [0.25, -1.0, 3.0], [1e8, -2.0, 0.5], [4.0, 0.25, 9.0])
    ]
    models = []
    if saved == "now":
        with strategy.scope():
            model = model_with_layer()
        train_step(model, x)
        path = tmp_path / "model.keras"
        model.save(path)
        expected = model.get_weights()
        # Weights loaded into the trained layer itself replace its last step's mean too.
        train_step(model, x - 1e7)
        model.save_weights(tmp_path / "other.weights.h5")
        model.load_weights(tmp_path / "other.weights.h5")
        model.set_weights(expected)
        models.append(model)
    with strategy.scope():
        loaded = keras.saving.load_model(path)
        fresh = model_with_layer()
    fresh.set_weights(expected)
    models.insert(0, loaded)
    assert [w.name for w in loaded.weights] == BATCH_NORM_WEIGHTS
    for got, want in zip(loaded.get_weights(), expected, strict=True):
        np.testing.assert_array_equal(got, want)
    for _ in range(2):
        want = train_step(fresh, x + 1.0).concatenated()
        for model in models:
            np.testing.assert_array_equal(train_step(model, x + 1.0).concatenated(), want)
    for model in models:
        for got, want in zip(model.get_weights(), fresh.get_weights(), strict=True):
            np.testing.assert_array_equal(got, want)
