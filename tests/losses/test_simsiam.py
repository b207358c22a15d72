"""SimSiamLoss against its NumPy formula, and its stop-gradient."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import SimSiamLoss
from tests.losses import numpy_reference


@pytest.mark.parametrize("shape", [(1, 3), (5, 4), (16, 8)])
def test_matches_numpy_formula(shape):
    rng = np.random.default_rng(shape[0])
    p, z = rng.normal(size=shape), rng.normal(size=shape)

    value = SimSiamLoss(dtype="float64")(p, z)

    np.testing.assert_allclose(value.numpy(), numpy_reference.simsiam(p, z), rtol=1e-12)


def test_identical_and_opposite_directions():
    p = np.array([[1.0, 2.0], [-3.0, 0.5]], "float32")

    np.testing.assert_allclose(SimSiamLoss()(p, 3.0 * p).numpy(), -1.0, rtol=1e-6)
    np.testing.assert_allclose(SimSiamLoss()(p, -p).numpy(), 1.0, rtol=1e-6)


def test_no_gradient_reaches_the_target():
    p = tf.constant(np.random.default_rng(0).normal(size=(4, 3)), tf.float32)
    z = tf.constant(np.random.default_rng(1).normal(size=(4, 3)), tf.float32)

    with tf.GradientTape(persistent=True) as tape:
        tape.watch([p, z])
        value = SimSiamLoss()(z, p)  # Keras' order: loss(y_true=target, y_pred=prediction)

    assert tape.gradient(value, z) is None
    assert np.abs(tape.gradient(value, p).numpy()).max() > 1e-3
