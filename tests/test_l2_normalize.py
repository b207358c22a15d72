"""`l2_normalize` at every site that normalises rows: a zero row gets a zero gradient."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.distances import CosineDistance
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.layers import CosineClassifier, MetricEmbedding
from tensorflow_similarity.losses import SimCLRLoss, SimSiamLoss, SupConLoss

ZERO, TINY = 0, 1  # row 0 is zeros, row 1 has norm 1e-7; the others are random


def rows(dtype="float32", n=8, d=6, seed=0):
    x = np.random.default_rng(seed).normal(size=(n, d))
    x[ZERO] = 0.0
    x[TINY] = 1e-7 / np.sqrt(d)
    return tf.constant(x, dtype)


def other(n=8, d=6, dtype="float32"):
    return tf.constant(np.random.default_rng(1).normal(size=(n, d)), dtype)


LABELS = tf.constant([0, 0, 1, 1, 2, 2, 3, 3])
SITES = {
    "l2_normalize": lambda x: tf.reduce_sum(l2_normalize(x) * other(dtype=x.dtype)),
    "CosineDistance": lambda x: tf.reduce_sum(CosineDistance()(x, other(dtype=x.dtype))),
    "SimCLRLoss": lambda x: SimCLRLoss()(other(dtype=x.dtype), x),
    "SimSiamLoss": lambda x: SimSiamLoss()(other(dtype=x.dtype), x),
    "SupConLoss": lambda x: SupConLoss()(LABELS, x),
    "CosineClassifier": lambda x: tf.reduce_sum(CosineClassifier(3)(x) * [1.0, -2.0, 0.5]),
}


def gradient(site, x):
    keras.utils.set_random_seed(0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = SITES[site](x)
    return value, tape.gradient(value, x).numpy().astype("float64")


@pytest.mark.parametrize("site", SITES)
def test_a_zero_row_gets_no_gradient_and_a_tiny_row_a_finite_one(site):
    value, grad = gradient(site, rows())
    assert np.isfinite(value.numpy()) and np.isfinite(grad).all()
    np.testing.assert_array_equal(grad[ZERO], 0.0)
    assert np.abs(grad[TINY]).max() <= 1.0
    assert np.abs(grad[2:]).max() > 0.0  # the other rows still learn


@pytest.mark.parametrize("site", ["l2_normalize", "CosineDistance"])
def test_float16_keeps_every_gradient_finite(site):
    value, grad = gradient(site, rows("float16"))
    assert np.isfinite(value.numpy()) and np.isfinite(grad).all()
    np.testing.assert_array_equal(grad[ZERO], 0.0)


def test_metric_embedding_gives_a_dead_row_no_gradient_in_float16():
    layer = MetricEmbedding(4, use_bias=False, dtype="mixed_float16")
    x = rows()
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(tf.cast(y, "float32") * other(d=4))
    grad = tape.gradient(loss, x).numpy()
    assert y.dtype == tf.float16 and np.isfinite(grad).all()
    np.testing.assert_array_equal(grad[ZERO], 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_values_are_tf_math_l2_normalizes(dtype):
    x = rows(dtype)
    ours, theirs = l2_normalize(x).numpy(), tf.math.l2_normalize(x, -1).numpy()
    np.testing.assert_array_equal(ours[2:], theirs[2:])
    # Below the floor, tf's float32 epsilon differs from 1e-12 by 2e-9 relative in float64.
    np.testing.assert_allclose(ours[:2], theirs[:2], rtol=1e-8)
    columns = tf.math.l2_normalize(x, axis=0).numpy()
    np.testing.assert_array_equal(l2_normalize(x, axis=0).numpy(), columns)


def test_the_gradient_of_a_normal_row_is_the_projection_off_its_direction():
    x = tf.constant([[3.0, 4.0]], "float64")
    upstream = tf.constant([[1.0, 2.0]], "float64")
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = l2_normalize(x)
    grad = tape.gradient(y, x, output_gradients=upstream).numpy()[0]
    u = np.array([0.6, 0.8])
    np.testing.assert_allclose(grad, (np.array([1.0, 2.0]) - u * (u @ [1.0, 2.0])) / 5.0)
