"""SimCLRLoss against its NumPy formula."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import SimCLRLoss
from tests.losses import numpy_reference


@pytest.mark.parametrize(
    ("shape", "temperature"), [((2, 3), 0.1), ((5, 4), 0.5), ((12, 8), 1.0), ((7, 2), 0.05)]
)
def test_matches_numpy_formula(shape, temperature):
    rng = np.random.default_rng(shape[0])
    z1 = rng.normal(size=shape)
    z2 = z1 + rng.normal(size=shape)

    value = SimCLRLoss(temperature=temperature, dtype="float64")(z1, z2)

    expected = numpy_reference.simclr(z1, z2, temperature)
    np.testing.assert_allclose(value.numpy(), expected, rtol=1e-10)


def test_is_invariant_to_the_scale_of_each_embedding():
    rng = np.random.default_rng(3)
    z1, z2 = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    scales = rng.uniform(0.1, 10.0, size=(6, 1))
    loss = SimCLRLoss(dtype="float64")

    np.testing.assert_allclose(loss(z1 * scales, z2).numpy(), loss(z1, z2).numpy(), rtol=1e-10)


def test_gradient_is_finite_at_a_low_temperature():
    z1 = tf.constant(np.random.default_rng(4).normal(size=(8, 4)), tf.float32)
    z2 = z1 + 0.01

    with tf.GradientTape() as tape:
        tape.watch(z1)
        value = SimCLRLoss(temperature=0.01)(z1, z2)
    grad = tape.gradient(value, z1).numpy()

    assert np.isfinite(value.numpy()) and np.all(np.isfinite(grad))


def test_rejects_invalid_temperature():
    for temperature in (0.0, -0.1, float("nan"), float("inf"), "0.1", None, True):
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
            SimCLRLoss(temperature=temperature)
    assert SimCLRLoss(temperature=np.float32(0.5)).get_config()["temperature"] == 0.5
