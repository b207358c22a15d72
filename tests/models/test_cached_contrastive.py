"""`ContrastiveModel(chunk_size=8)`: a batch of 32 view pairs in chunks of 8 against one pass.

float64, so that the cached step and one pass, which differ only in the order
of sums, agree to 1e-12: the loss, every gradient and the optimizer's step
(with MoCo v3 the teacher's move too), on one device and on 2 replicas. Batch
norm is checked against its per-chunk rule written out by hand.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import SimCLRLoss
from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model
from tensorflow_similarity.models.cached_embeddings import embed_in_chunks
from tensorflow_similarity.testing import mirrored_strategy, run_on_replicas

BATCH, CHUNK, FEATURES, HIDDEN, WIDTH = 32, 8, 5, 12, 6
TOL = {"rtol": 1e-12, "atol": 1e-12}

RNG = np.random.default_rng(11)
BASE = RNG.normal(size=(2 * BATCH, FEATURES))  # Two batches for fit; one for the rest.
VIEW1 = BASE + 0.3 * RNG.normal(size=BASE.shape)
VIEW2 = BASE + 0.3 * RNG.normal(size=BASE.shape)


pytestmark = pytest.mark.usefixtures("float64")


@keras.saving.register_keras_serializable(package="TestCachedContrastive")
class RowCounter(keras.layers.Layer):
    """Identity that records the rows of each batch it is traced with."""

    seen: list = []

    def call(self, inputs):
        RowCounter.seen.append(inputs.shape[0])
        return inputs


def mlp(name, width_in, layers):
    inputs = keras.Input((width_in,))
    x = inputs
    for layer in layers:
        x = layer(x)
    return keras.Model(inputs, x, name=name)


def build(algorithm, chunk_size=None, middle=None, **kwargs):
    """A seeded model of Dense layers (and `middle` in the backbone), compiled with SGD(0.5)."""
    keras.utils.set_random_seed(5)
    backbone = mlp(
        "backbone",
        FEATURES,
        [
            RowCounter(),
            keras.layers.Dense(HIDDEN, activation="tanh"),
            *([middle] if middle else []),
        ],
    )
    projector = mlp(
        "projector",
        HIDDEN,
        [keras.layers.Dense(HIDDEN, activation="tanh"), keras.layers.Dense(WIDTH)],
    )
    predictor = (
        mlp("predictor", WIDTH, [keras.layers.Dense(WIDTH, activation="tanh")])
        if algorithm == "mocov3"
        else None
    )
    model = ContrastiveModel(
        backbone, projector, predictor, algorithm=algorithm, chunk_size=chunk_size, **kwargs
    )
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5))
    return model


def pairs():
    return tf.data.Dataset.from_tensor_slices((VIEW1, VIEW2)).batch(BATCH, drop_remainder=True)


def gradients(model, view1, view2):
    """The replica's loss share and gradients of one micro-batch (no step applied)."""
    grads, share, _ = model.micro_batch_gradients(tf.stack([view1, view2], axis=1))
    return share, grads


def assert_same(got, expected):
    (loss, grads), (expected_loss, expected_grads) = got, expected
    np.testing.assert_allclose(np.asarray(loss), np.asarray(expected_loss), **TOL)
    assert len(grads) == len(expected_grads)
    reached = 0
    for g, e in zip(grads, expected_grads, strict=True):
        assert (g is None) == (e is None)
        if e is not None:
            np.testing.assert_allclose(np.asarray(g), np.asarray(e), **TOL)
            reached += 1
    assert reached >= 4  # The backbone's and the projector's kernels and biases at least.


@pytest.fixture(scope="module")
def one_pass():
    """Each method's loss share and gradients of one batch in one pass on one device, by name."""
    found = {}

    def reference(algorithm):
        if algorithm not in found:
            share, grads = tf.function(gradients)(build(algorithm), VIEW1[:BATCH], VIEW2[:BATCH])
            found[algorithm] = (share.numpy(), [g if g is None else g.numpy() for g in grads])
        return found[algorithm]

    return reference


# Barlow Twins' cross-correlation is a function of the whole batch's outputs: exact too.
@pytest.mark.parametrize(
    "algorithm, replicas",
    [("simclr", 1), ("simclr", 2), ("mocov3", 1), ("mocov3", 2), ("barlow", 2)],
)
def test_loss_and_gradients_equal_one_pass(one_pass, algorithm, replicas):
    expected = one_pass(algorithm)
    views = (VIEW1[:BATCH], VIEW2[:BATCH])
    if replicas == 1:
        model = build(algorithm, chunk_size=CHUNK)
        RowCounter.seen.clear()
        got = tf.function(gradients)(model, *views)
        # The student never saw more than one chunk (SimCLR: of both views) at once.
        assert max(RowCounter.seen) == CHUNK * (2 if algorithm == "simclr" else 1)
    else:
        strategy = mirrored_strategy(replicas)
        with strategy.scope():
            model = build(algorithm, chunk_size=CHUNK)
        # Each replica returns its share of the loss; the optimizer adds their gradients.
        got = run_on_replicas(
            lambda v1, v2: gradients(model, v1, v2), views, sizes=[BATCH // 2] * 2
        ).summed()
    assert_same(got, expected)


def test_fit_steps_equal_one_pass_on_two_replicas_with_accumulation():
    """MoCo v3, 2 batches of 32 per step, each in chunks of 8 on each of 2 replicas."""

    def fit(chunk_size, strategy):
        with strategy.scope():
            model = build("mocov3", chunk_size=chunk_size, accumulation_steps=2)
        history = model.fit(pairs(), epochs=1, verbose=0)
        return history.history["loss"], [w.numpy() for w in model.weights]

    (loss, weights) = fit(CHUNK, mirrored_strategy(2))
    (expected_loss, expected_weights) = fit(None, tf.distribute.get_strategy())
    np.testing.assert_allclose(loss, expected_loss, **TOL)
    assert len(weights) == len(expected_weights)
    for got, want in zip(weights, expected_weights, strict=True):
        np.testing.assert_allclose(got, want, **TOL)  # The teacher's too.
    assert not np.allclose(expected_weights[0], build("mocov3").weights[0].numpy())


def batch_norm_reference(model, groups):
    """Per-chunk batch norm written out: the loss, its gradients and the moving statistics.

    `groups` lists the batch rows of each chunk, in order. SimCLR runs both
    views as one batch, so a chunk's statistics are over its rows of both.
    """
    dense1, bn = (layer for layer in model.backbone.layers if layer.weights)
    dense2, dense3 = (layer for layer in model.projector.layers if layer.weights)
    order = np.argsort(np.concatenate(groups))
    means, variances = [], []
    with tf.GradientTape() as tape:
        h = [
            tf.tanh(tf.constant(v) @ dense1.kernel + dense1.bias)
            for v in (VIEW1[:BATCH], VIEW2[:BATCH])
        ]
        normal = [[], []]
        for rows in groups:
            part = tf.concat([tf.gather(h[0], rows), tf.gather(h[1], rows)], 0)
            mean = tf.reduce_mean(part, 0)
            variance = tf.reduce_mean((part - mean) ** 2, 0)
            out = (part - mean) / tf.sqrt(variance + bn.epsilon) * bn.gamma + bn.beta
            normal[0].append(out[: len(rows)])
            normal[1].append(out[len(rows) :])
            means.append(mean.numpy())
            variances.append(variance.numpy())
        z = [
            tf.tanh(tf.gather(tf.concat(n, 0), order) @ dense2.kernel + dense2.bias) @ dense3.kernel
            + dense3.bias
            for n in normal
        ]
        value = tf.cast(SimCLRLoss()(z[0], z[1]), "float32")  # As the step reports it.
    grads = tape.gradient(value, model.trainable_variables)
    moving_mean, moving_variance = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    for mean, variance in zip(means, variances, strict=True):  # Once per chunk, in order.
        moving_mean = 0.5 * moving_mean + 0.5 * mean
        moving_variance = 0.5 * moving_variance + 0.5 * variance
    return (value, grads), (moving_mean, moving_variance)


def test_batch_norm_normalises_each_chunk_of_both_views_and_updates_once_per_chunk():
    model = build("simclr", chunk_size=CHUNK, middle=keras.layers.BatchNormalization(momentum=0.5))
    groups = [list(range(start, start + CHUNK)) for start in range(0, BATCH, CHUNK)]
    expected, moving = batch_norm_reference(model, groups)
    assert_same(tf.function(gradients)(model, VIEW1[:BATCH], VIEW2[:BATCH]), expected)
    bn = model.backbone.layers[-1]
    for got, want in zip((bn.moving_mean, bn.moving_variance), moving, strict=True):
        np.testing.assert_allclose(got.numpy(), want, **TOL)


def test_sync_batch_norm_normalises_the_replicas_chunks_together():
    reference = build("simclr", middle=keras.layers.BatchNormalization(momentum=0.5))
    half = BATCH // 2
    # Chunk i of the step is replica 0's chunk i with replica 1's chunk i.
    groups = [
        [*range(i, i + CHUNK), *range(half + i, half + i + CHUNK)] for i in range(0, half, CHUNK)
    ]
    expected, moving = batch_norm_reference(reference, groups)
    strategy = mirrored_strategy(2)
    with strategy.scope():
        model = build(
            "simclr",
            chunk_size=CHUNK,
            middle=keras.layers.BatchNormalization(momentum=0.5),
            sync_bn=True,
        )
    model.set_weights(reference.get_weights())
    bn = model.backbone.layers[-1]
    assert type(bn).__name__ == "SyncBatchNormalization"

    def step(v1, v2):
        share, grads = gradients(model, v1, v2)
        return share, grads, (tf.identity(bn.moving_mean), tf.identity(bn.moving_variance))

    run = run_on_replicas(
        step, (VIEW1[:BATCH], VIEW2[:BATCH]), sizes=[half, half], strategy=strategy
    )
    assert_same(run.summed(lambda r: r[:2]), expected)
    for result in run.results:  # Every replica's moving statistics, once per chunk.
        for got, want in zip(result[2], moving, strict=True):
            np.testing.assert_allclose(got, want, **TOL)


def test_dropout_draws_the_same_values_in_both_passes():
    model = build("simclr", chunk_size=CHUNK, middle=keras.layers.Dropout(0.5, seed=2))
    start = [v.numpy() for v in model.non_trainable_variables]
    got = tf.function(gradients)(model, VIEW1[:BATCH], VIEW2[:BATCH])
    for variable, value in zip(model.non_trainable_variables, start, strict=True):
        variable.assign(value)

    @tf.function
    def reference():
        # Every chunk's activations under one tape, the seeds advancing chunk by chunk.
        with tf.GradientTape() as tape:
            z = [[], []]
            for s in range(0, BATCH, CHUNK):
                pair = tf.concat([VIEW1[s : s + CHUNK], VIEW2[s : s + CHUNK]], 0)
                out = model.projector(model.backbone(pair, training=True), training=True)
                z[0].append(out[:CHUNK])
                z[1].append(out[CHUNK:])
            value = tf.cast(loss(tf.concat(z[0], 0), tf.concat(z[1], 0)), "float32")
        return value, tape.gradient(value, model.trainable_variables)

    loss = SimCLRLoss()
    assert_same(got, reference())


def test_embed_in_chunks_joins_the_chunks_in_order():
    x = tf.constant(BASE)
    got = embed_in_chunks(lambda rows: {"sum": tf.reduce_sum(rows, 1)}, x, CHUNK)
    np.testing.assert_allclose(got["sum"].numpy(), BASE.sum(1), **TOL)


def test_get_config_keeps_chunk_size():
    model = build("simclr", chunk_size=CHUNK)
    config = model.get_config()
    assert config["chunk_size"] == CHUNK
    assert ContrastiveModel.from_config(config).chunk_size == CHUNK


def test_dino_is_refused_by_name_before_anything_is_built(monkeypatch):
    backbone = mlp("backbone", FEATURES, [keras.layers.Dense(HIDDEN)])
    built = []
    monkeypatch.setattr(keras.Model, "build", lambda *a, **k: built.append(a))
    with pytest.raises(ValueError, match=r"DINO cannot train with chunk_size=8: its forward"):
        ContrastiveModel(backbone, backbone, algorithm="dino", chunk_size=CHUNK)
    assert not built


@pytest.mark.parametrize("chunk_size", [0, 2.5, "8", True])
def test_bad_chunk_size_is_refused(chunk_size):
    backbone = mlp("backbone", FEATURES, [keras.layers.Dense(HIDDEN)])
    with pytest.raises(ValueError, match="chunk_size must be None or a positive integer"):
        create_contrastive_model(backbone, "simclr", chunk_size=chunk_size)


def test_chunk_size_that_does_not_divide_the_replica_batch_is_refused_before_work():
    model = build("simclr", chunk_size=24)
    before = [w.numpy() for w in model.weights]
    with pytest.raises(ValueError, match=r"chunk_size=24 does not divide .* batch of 32"):
        model.fit(pairs(), epochs=1, verbose=0)
    for weight, want in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(weight.numpy(), want)


def test_activity_losses_are_refused():
    middle = keras.layers.Dense(HIDDEN, activity_regularizer="l2")
    model = build("simclr", chunk_size=CHUNK, middle=middle)
    with pytest.raises(ValueError, match=r"forward pass adds 1 loss\(es\)"):
        model.fit(pairs(), epochs=1, verbose=0)
