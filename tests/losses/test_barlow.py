"""Barlow against its NumPy formula."""

from __future__ import annotations

import numpy as np
import pytest

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
