"""Cached embeddings (`chunk_size`): a batch of 64 in chunks of 8 against one pass of 64.

float64 throughout, so that the chunked step and one pass, which differ only
in the order of sums, agree to 1e-12: the loss, every gradient (the model's
and the loss's own weights') and the optimizer's step, on one device and on
2 replicas. Batch norm is checked against its per-chunk rule written out by
hand; dropout against a forward pass over the same chunks under one tape.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.layers import SyncBatchNormalization
from tensorflow_similarity.losses import MultiNegativesRankLoss, ProxyAnchorLoss, SupConLoss
from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.models.cached_embeddings import cached_embedding_step, chunk_count
from tensorflow_similarity.testing import mirrored_strategy, run_on_replicas

BATCH, CHUNK, FEATURES, HIDDEN, EMBEDDING, CLASSES = 64, 8, 6, 16, 4, 8
TOL = {"rtol": 1e-12, "atol": 1e-12}

RNG = np.random.default_rng(7)
X = RNG.normal(size=(BATCH, FEATURES))
LABELS = np.arange(BATCH) % CLASSES
QUERIES = RNG.normal(size=(BATCH, EMBEDDING)) / 2.0  # MultiNegativesRank's fixed other tower.

# Each loss with the targets it takes as `y`: SupCon and ProxyAnchor the
# labels, MultiNegativesRank the queries that rank the model's embeddings.
LOSSES = {
    "supcon": (lambda: SupConLoss(temperature=0.5), LABELS),
    "multineg": (lambda: MultiNegativesRankLoss(scale=2.0), QUERIES),
    "proxyanchor": (
        lambda: ProxyAnchorLoss(CLASSES, EMBEDDING, proxy_initializer="glorot_uniform"),
        LABELS,
    ),
}


pytestmark = pytest.mark.usefixtures("float64")


def build(loss=None, chunk_size=None, middle=None, **layer_kwargs):
    """A tiny seeded model: Dense(16, tanh) -> [middle] -> Dense(4), compiled with SGD(1)."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input((FEATURES,))
    h = keras.layers.Dense(HIDDEN, activation="tanh", **layer_kwargs)(inputs)
    if middle is not None:
        h = middle(h)
    outputs = keras.layers.Dense(EMBEDDING)(h)
    model = SimilarityModel(inputs, outputs, chunk_size=chunk_size)
    if loss is not None:
        model.compile(keras.optimizers.SGD(learning_rate=1.0), loss=LOSSES[loss][0]())
        model.compute_loss(x=X[:2], y=LOSSES[loss][1][:2], y_pred=model(X[:2]))  # Builds the loss.
    return model


def one_pass(model, x, y):
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True), training=True)
    return loss, tape.gradient(loss, model.trainable_variables)


def cached(model, x, y):
    step = cached_embedding_step(
        lambda chunk: model(chunk, training=True),
        x,
        lambda z: model.compute_loss(x=x, y=y, y_pred=z, training=True),
        CHUNK,
        model.trainable_variables,
        state=model.non_trainable_variables,
    )
    return step.loss, step.gradients


def assert_same(got, expected):
    loss, grads = got
    expected_loss, expected_grads = expected
    np.testing.assert_allclose(np.asarray(loss), np.asarray(expected_loss), **TOL)
    assert len(grads) == len(expected_grads)
    for g, e in zip(grads, expected_grads, strict=True):
        assert g is not None and e is not None
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), **TOL)


def dynamic_batch(fn, model, y):
    """`fn(model, x, y)` traced for batches of any size: its chunks run in a while loop."""
    spec = tf.TensorSpec([None, FEATURES], tf.float64)
    return tf.function(lambda x: fn(model, x, y), input_signature=[spec])(tf.constant(X))


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_loss_and_gradients_equal_one_pass(loss):
    model = build(loss)
    y = LOSSES[loss][1]
    expected = tf.function(one_pass)(model, X, y)
    assert_same(tf.function(cached)(model, X, y), expected)
    assert_same(dynamic_batch(cached, model, y), expected)
    if loss == "proxyanchor":  # The proxies get their gradient from the loss alone.
        assert model.trainable_variables[-1].shape == (CLASSES, EMBEDDING)


# SupCon across replicas is test_fit_step_equals_one_pass[2]'s.
@pytest.mark.parametrize("loss", ["multineg", "proxyanchor"])
def test_two_replicas_in_chunks_equal_one_pass(loss):
    reference = build(loss)
    y = LOSSES[loss][1]
    expected = tf.function(one_pass)(reference, X, y)
    with mirrored_strategy(2).scope():
        model = build(loss)
    model.set_weights(reference.get_weights())
    run = run_on_replicas(lambda x, y: cached(model, x, y), (X, y), sizes=[BATCH // 2] * 2)
    # Each replica returns its share of the global loss; the optimizer adds their gradients.
    assert_same(run.summed(), expected)


@pytest.mark.parametrize("replicas", [1, 2])
def test_fit_step_equals_one_pass(replicas):
    def fit(chunk_size):
        strategy = mirrored_strategy(replicas) if replicas > 1 else tf.distribute.get_strategy()
        with strategy.scope():
            model = build("supcon", chunk_size=chunk_size)
        history = model.fit(X, LABELS, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        return history.history["loss"], model.get_weights()

    (loss, weights), (expected_loss, expected_weights) = fit(CHUNK), fit(None)
    np.testing.assert_allclose(loss, expected_loss, **TOL)
    for got, expected in zip(weights, expected_weights, strict=True):
        np.testing.assert_allclose(got, expected, **TOL)
    assert not np.allclose(expected_weights[0], build("supcon").get_weights()[0])  # It stepped.


@pytest.mark.parametrize("batch", [BATCH, None], ids=["static", "dynamic"])
def test_dropout_draws_the_same_values_in_both_passes(batch):
    model = build("supcon", middle=keras.layers.Dropout(0.5, seed=1))

    @tf.function(input_signature=[tf.TensorSpec([batch, FEATURES], tf.float64)])
    def both(x):
        start = [tf.identity(v) for v in model.non_trainable_variables]
        got = cached(model, x, LABELS)
        after = [tf.identity(v) for v in model.non_trainable_variables]
        for v, s in zip(model.non_trainable_variables, start, strict=True):
            v.assign(s)
        # The reference holds every chunk's activations under one tape.
        with tf.GradientTape() as tape:
            z = tf.concat(
                [model(x[i : i + CHUNK], training=True) for i in range(0, BATCH, CHUNK)], 0
            )
            loss = model.compute_loss(x=x, y=LABELS, y_pred=z, training=True)
        grads = tape.gradient(loss, model.trainable_variables)
        return got, (loss, grads), after, [tf.identity(v) for v in model.non_trainable_variables]

    for _ in range(2):  # The second time the seeds go on from where the first left them.
        got, expected, after, reference_after = both(tf.constant(X))
        assert_same(got, expected)
        # The seed advanced once per chunk, as in the reference, not twice.
        for a, b in zip(after, reference_after, strict=True):
            np.testing.assert_array_equal(a, b)


def batch_norm_reference(model, x, y, loss, groups=None):
    """Per-chunk batch norm written out: each chunk normalised by its own statistics.

    `groups` lists the rows of each chunk (by default 8 consecutive rows); the
    embeddings stay in the batch's order.
    """
    dense1, bn, dense2 = (layer for layer in model.layers if layer.weights)
    groups = groups or [list(range(i, i + CHUNK)) for i in range(0, BATCH, CHUNK)]
    with tf.GradientTape() as tape:
        h = tf.tanh(x @ dense1.kernel + dense1.bias)
        chunks, means, variances = [], [], []
        for rows in groups:
            part = tf.gather(h, rows)
            mean = tf.reduce_mean(part, 0)
            variance = tf.reduce_mean((part - mean) ** 2, 0)
            normal = (part - mean) / tf.sqrt(variance + bn.epsilon)
            chunks.append(normal * bn.gamma + bn.beta)
            means.append(mean)
            variances.append(variance)
        order = np.argsort(np.concatenate(groups))
        z = tf.gather(tf.concat(chunks, 0), order) @ dense2.kernel + dense2.bias
        value = loss(y, z)
    grads = tape.gradient(value, model.trainable_variables)
    moving_mean, moving_variance = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    for mean, variance in zip(means, variances, strict=True):  # Once per chunk, in order.
        moving_mean = moving_mean * bn.momentum + mean.numpy() * (1 - bn.momentum)
        moving_variance = moving_variance * bn.momentum + variance.numpy() * (1 - bn.momentum)
    return (value, grads), (moving_mean, moving_variance)


def test_batch_norm_normalises_each_chunk_and_updates_once_per_chunk():
    model = build("supcon", middle=keras.layers.BatchNormalization(momentum=0.5))
    bn = model.layers[2]
    expected, (moving_mean, moving_variance) = batch_norm_reference(
        model, tf.constant(X), LABELS, SupConLoss(temperature=0.5)
    )
    start = [v.numpy() for v in model.non_trainable_variables]
    for run in (tf.function(cached), lambda model, x, y: dynamic_batch(cached, model, y)):
        for v, value in zip(model.non_trainable_variables, start, strict=True):
            v.assign(value)
        assert_same(run(model, X, LABELS), expected)
        np.testing.assert_allclose(bn.moving_mean.numpy(), moving_mean, **TOL)
        np.testing.assert_allclose(bn.moving_variance.numpy(), moving_variance, **TOL)


def test_sync_batch_norm_normalises_the_replicas_chunks_together():
    reference = build("supcon", middle=keras.layers.BatchNormalization(momentum=0.5))
    half = BATCH // 2
    # Chunk i of the step is replica 0's chunk i with replica 1's chunk i.
    groups = [
        [*range(i, i + CHUNK), *range(half + i, half + i + CHUNK)] for i in range(0, half, CHUNK)
    ]
    expected, moving = batch_norm_reference(
        reference, tf.constant(X), LABELS, SupConLoss(temperature=0.5), groups
    )
    with mirrored_strategy(2).scope():
        model = build("supcon", middle=SyncBatchNormalization(momentum=0.5))
    model.set_weights(reference.get_weights())

    def step(x, y):
        loss, grads = cached(model, x, y)
        bn = model.layers[2]
        return loss, grads, (tf.identity(bn.moving_mean), tf.identity(bn.moving_variance))

    run = run_on_replicas(step, (X, LABELS), sizes=[half, half])
    assert_same(run.summed(lambda r: r[:2]), expected)
    for result in run.results:  # Every replica's moving statistics, once per chunk.
        for got, want in zip(result[2], moving, strict=True):
            np.testing.assert_allclose(got, want, **TOL)


def test_get_config_keeps_chunk_size():
    model = build(chunk_size=CHUNK)
    assert SimilarityModel.from_config(model.get_config()).chunk_size == CHUNK
    assert "chunk_size" not in build().get_config()


@pytest.mark.parametrize("chunk_size", [0, -8, 2.5, "8", True])
def test_bad_chunk_size_is_refused(chunk_size):
    with pytest.raises(ValueError, match="chunk_size must be None or a positive integer"):
        build(chunk_size=chunk_size)


def test_chunk_size_that_does_not_divide_the_batch_is_refused_before_work():
    model = build("supcon", chunk_size=24)
    before = model.get_weights()
    data = tf.data.Dataset.from_tensor_slices((X, LABELS)).batch(BATCH, drop_remainder=True)
    with pytest.raises(ValueError, match=r"chunk_size=24 does not divide .* batch of 64"):
        model.fit(data, verbose=0)
    for got, expected in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_chunk_size_that_does_not_divide_a_run_time_batch_is_refused():
    count = tf.function(lambda n: chunk_count(n, 8), input_signature=[tf.TensorSpec([], tf.int32)])
    assert int(count(tf.constant(64))) == 8
    with pytest.raises(tf.errors.InvalidArgumentError, match="chunk_size=8 does not divide"):
        count(tf.constant(60))


def test_forward_losses_are_refused_before_work():
    model = build("supcon", chunk_size=CHUNK, activity_regularizer="l2")
    before = model.get_weights()
    with pytest.raises(
        ValueError, match=r"forward pass adds 1 loss.*activity_regularizer on dense"
    ):
        model.fit(X, LABELS, batch_size=BATCH, verbose=0)
    for got, expected in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_weight_regularization_is_exact():
    reference = build("supcon", kernel_regularizer="l2")
    model = build("supcon", kernel_regularizer="l2")
    expected = tf.function(one_pass)(reference, X, LABELS)
    assert_same(tf.function(cached)(model, X, LABELS), expected)
