"""Barlow against its NumPy formula."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import Barlow
from tests.losses import numpy_reference


@pytest.mark.parametrize(
    ("shape", "lambda_", "epsilon"),
    [((2, 3), 5e-3, 1e-5), ((6, 4), 0.1, 0.0), ((16, 8), 1.0, 1e-2), ((5, 1), 0.5, 1e-5)],
)
def test_matches_numpy_formula(shape, lambda_, epsilon):
    rng = np.random.default_rng(shape[0])
    za = rng.normal(loc=3.0, scale=2.0, size=shape)
    zb = za + rng.normal(size=shape)

    value = Barlow(lambda_=lambda_, epsilon=epsilon, dtype="float64")(za, zb)

    expected = numpy_reference.barlow(za, zb, lambda_, epsilon)
    np.testing.assert_allclose(value.numpy(), expected, rtol=1e-10)


def test_is_zero_for_identical_decorrelated_views():
    # Orthogonal zero-mean columns of equal norm: C is exactly the identity.
    z = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])

    np.testing.assert_allclose(Barlow(epsilon=0.0, dtype="float64")(z, z).numpy(), 0.0, atol=1e-12)


def test_is_invariant_to_feature_offsets_and_scales():
    rng = np.random.default_rng(5)
    za, zb = rng.normal(size=(8, 3)), rng.normal(size=(8, 3))
    loss = Barlow(lambda_=0.3, epsilon=0.0, dtype="float64")

    shifted = za * np.array([2.0, 0.5, 7.0]) + np.array([10.0, -3.0, 0.1])
    np.testing.assert_allclose(loss(shifted, zb).numpy(), loss(za, zb).numpy(), rtol=1e-9)


def test_rejects_negative_coefficients():
    for argument in ("lambda_", "epsilon"):
        with pytest.raises(ValueError, match=f"{argument} must be a finite number >= 0"):
            Barlow(**{argument: -1e-3})


def test_a_subclass_that_overrides_off_diagonal_is_still_called():
    class OnDiagonalOnly(Barlow):
        def off_diagonal(self, x):
            return tf.zeros([1], x.dtype)

    rng = np.random.default_rng(6)
    za, zb = rng.normal(size=(8, 3)), rng.normal(size=(8, 3))
    value = OnDiagonalOnly(lambda_=0.5, epsilon=0.0, dtype="float64")(za, zb).numpy()
    np.testing.assert_allclose(value, numpy_reference.barlow(za, zb, 0.0, 0.0), rtol=1e-10)
    assert Barlow(lambda_=0.5, epsilon=0.0, dtype="float64")(za, zb).numpy() > value


def test_barlow_twins_loss_and_vicreg_loss_are_0_17s_classes_by_their_papers_names():
    from tensorflow_similarity import losses

    assert losses.BarlowTwinsLoss is losses.Barlow and losses.VICRegLoss is losses.VicReg
    for cls in (losses.BarlowTwinsLoss, losses.VICRegLoss):
        restored = keras.losses.deserialize(keras.losses.serialize(cls(lambda_=0.5)))
        assert type(restored) is cls and restored.lambda_ == 0.5
