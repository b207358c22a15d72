"""The global-batch contract of the metric losses under tf.distribute.

A plain Keras model compiled with the loss and trained by Keras' own `fit`
for one SGD step under a MirroredStrategy over K replicas must report the
loss and reach the weights of one device trained on the concatenated batch.
The labels are laid out so that every anchor's positives sit on other
replicas: per-replica mining would see none.
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import (
    ArcFaceLoss,
    CircleLoss,
    MultiNegativesRankLoss,
    MultiSimilarityLoss,
    PNLoss,
    SoftNearestNeighborLoss,
    SupConLoss,
    TripletLoss,
)
from tensorflow_similarity.testing import mirrored_strategy, run_local_workers, run_on_replicas

IN_DIM, OUT_DIM, BATCH = 5, 4, 8
LEARNING_RATE = 0.5

LOSSES = {
    # The Dense head stands in for a CosineClassifier: small weights keep its
    # outputs inside [-1, 1], the range of cosines.
    "arcface": lambda: ArcFaceLoss(scale=4.0),
    "triplet": lambda: TripletLoss(),
    "triplet_l2_margin": lambda: TripletLoss(distance="l2", margin=1.0),
    "pn": lambda: PNLoss(negative_mining_strategy="hard"),
    "circle": lambda: CircleLoss(gamma=4.0),
    "multisim": lambda: MultiSimilarityLoss(beta=10.0, epsilon=0.5),
    "softnn": lambda: SoftNearestNeighborLoss(),
    "supcon": lambda: SupConLoss(temperature=0.5),
    "multinegrank": lambda: MultiNegativesRankLoss(scale=2.0),
}


def _data(seed: int, batch: int = BATCH):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, IN_DIM)).astype("float32")
    # Replica r holds rows [r * B/K, (r + 1) * B/K): with labels 0..3 twice,
    # each row's positive is batch/2 rows away, on another replica for K in {2, 4}.
    labels = np.tile(np.arange(batch // 2), 2).astype("int32")
    kernel = rng.normal(size=(IN_DIM, OUT_DIM)).astype("float32")
    return x, labels, kernel


def _targets(loss_name, labels):
    if loss_name == "multinegrank":
        return np.random.default_rng(0).normal(size=(len(labels), OUT_DIM)).astype("float32")
    return labels


def _one_device_step(loss, x, y, kernel):
    """One SGD step by hand on one device: the loss and the updated kernel."""
    kernel = tf.Variable(kernel)
    with tf.GradientTape() as tape:
        value = loss(y, tf.matmul(x, kernel))
    return float(value), (kernel - LEARNING_RATE * tape.gradient(value, kernel)).numpy()


def _fit_one_step_of_every_loss(x, ys, kernels, strategy):
    """One `fit` step of a model with one Dense output per loss (independent heads)."""
    names = sorted(LOSSES)
    with strategy.scope():
        inputs = keras.Input((IN_DIM,))
        heads = [keras.layers.Dense(OUT_DIM, use_bias=False, name=name) for name in names]
        model = keras.Model(inputs, [head(inputs) for head in heads])
        for head, name in zip(heads, names, strict=True):
            head.kernel.assign(kernels[name])
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE),
            loss=[LOSSES[name]() for name in names],
        )
    history = model.fit(
        x, [ys[name] for name in names], batch_size=len(x), epochs=1, shuffle=False, verbose=0
    )
    losses = {name: history.history[f"{name}_loss"][0] for name in names}
    return losses, {name: model.get_layer(name).kernel.numpy() for name in names}


@pytest.mark.parametrize("k", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_fit_under_mirrored_strategy_matches_one_device_for_every_loss(k):
    x, labels, _ = _data(seed=k)
    rng = np.random.default_rng(k)
    kernels = {name: rng.normal(size=(IN_DIM, OUT_DIM)).astype("float32") for name in LOSSES}
    kernels["arcface"] *= 0.15
    ys = {name: _targets(name, labels) for name in LOSSES}

    fit_losses, fit_kernels = _fit_one_step_of_every_loss(x, ys, kernels, mirrored_strategy(k))

    for name in sorted(LOSSES):
        expected_loss, expected_kernel = _one_device_step(
            LOSSES[name](), x, ys[name], kernels[name]
        )
        assert expected_loss > 1e-3, name
        np.testing.assert_allclose(fit_losses[name], expected_loss, rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(
            fit_kernels[name], expected_kernel, rtol=1e-5, atol=1e-6, err_msg=name
        )
        assert np.abs(expected_kernel - kernels[name]).max() > 1e-3, f"{name}: nothing moved"


def test_fit_on_one_device_is_the_hand_written_step():
    x, labels, _ = _data(seed=1)
    kernels = {name: np.eye(IN_DIM, OUT_DIM, dtype="float32") + 0.1 for name in LOSSES}
    ys = {name: _targets(name, labels) for name in LOSSES}

    fit_losses, fit_kernels = _fit_one_step_of_every_loss(
        x, ys, kernels, tf.distribute.get_strategy()
    )

    for name in ("triplet", "supcon"):
        expected_loss, expected_kernel = _one_device_step(
            LOSSES[name](), x, ys[name], kernels[name]
        )
        np.testing.assert_allclose(fit_losses[name], expected_loss, rtol=1e-6)
        np.testing.assert_allclose(fit_kernels[name], expected_kernel, rtol=1e-6, atol=1e-7)


def _per_replica_run(loss, x, labels, kernel, sizes):
    strategy = mirrored_strategy(len(sizes))
    with strategy.scope():
        dense = keras.layers.Dense(OUT_DIM, use_bias=False)
        dense.build((None, IN_DIM))
        dense.kernel.assign(kernel)

    def replica_step(x, labels):
        with tf.GradientTape() as tape:
            value = loss(labels, dense(x))
            total = tf.reduce_sum(value)
        return value, tape.gradient(total, dense.kernel)

    run = run_on_replicas(replica_step, (x, labels), sizes, strategy=strategy)
    return [value for value, _ in run.results], run.summed(lambda result: result[1])


def _one_device(loss, x, labels, kernel):
    dense = keras.layers.Dense(OUT_DIM, use_bias=False)
    dense.build((None, IN_DIM))
    dense.kernel.assign(kernel)
    with tf.GradientTape() as tape:
        value = loss(labels, dense(x))
        total = tf.reduce_sum(value)
    return value.numpy(), tape.gradient(total, dense.kernel).numpy()


@pytest.mark.parametrize("reduction", ["none", "sum"])
def test_none_and_sum_return_this_replicas_anchors(reduction):
    sizes = (3, 5)
    x, labels, kernel = _data(seed=9)
    loss = TripletLoss(reduction=reduction)
    expected, expected_grad = _one_device(loss, x, labels, kernel)

    values, grad_sum = _per_replica_run(loss, x, labels, kernel, sizes)

    if reduction == "none":
        assert [len(v) for v in values] == list(sizes)
        np.testing.assert_allclose(np.concatenate(values), expected, rtol=1e-5, atol=1e-7)
    else:
        np.testing.assert_allclose(sum(values), expected, rtol=1e-5)
    # The replicas' summed gradient of their own sums is the global sum's gradient.
    np.testing.assert_allclose(grad_sum, expected_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_two_worker_training_matches_one_device(tmp_path):
    """Two MultiWorkerMirroredStrategy workers on 127.0.0.1, one replica each.

    Both user paths that work there (see `MetricLoss`): a custom training
    loop, and `fit` on batches packing `(x, y)` into one tensor.
    """
    x, labels, kernel = _data(seed=21)
    np.savez(tmp_path / "data.npz", x=x, labels=labels, kernel=kernel)

    script = Path(__file__).with_name("mwms_metric_worker.py")
    run_local_workers(script, 2, [str(tmp_path)], timeout=300)

    for name, make_loss in (("triplet", TripletLoss), ("multisim", MultiSimilarityLoss)):
        expected_loss, expected_kernel = _one_device_step(make_loss(), x, labels, kernel)
        assert np.abs(expected_kernel - kernel).max() > 1e-3, f"{name}: nothing moved"
        for path in ("loop", "fit"):
            for task in range(2):
                got = np.load(tmp_path / f"{name}_{path}_worker{task}.npz")
                where = f"{name}, {path}, worker {task}"
                np.testing.assert_allclose(
                    float(got["loss"]), expected_loss, rtol=1e-5, err_msg=where
                )
                np.testing.assert_allclose(
                    got["kernel"], expected_kernel, rtol=1e-5, atol=1e-6, err_msg=where
                )
