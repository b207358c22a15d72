"""VicReg against its NumPy formula."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.losses import VicReg
from tests.losses import numpy_reference

DEFAULTS = {"lambda_": 25.0, "mu": 25.0, "nu": 1.0, "gamma": 1.0, "epsilon": 1e-4}


@pytest.mark.parametrize(
    ("shape", "params"),
    [
        ((2, 3), {}),
        ((6, 4), {"gamma": 3.0}),
        ((16, 8), {"lambda_": 1.0, "mu": 0.5, "nu": 2.0, "gamma": 0.7, "epsilon": 0.0}),
        ((5, 1), {"mu": 0.0}),
    ],
)
def test_matches_numpy_formula(shape, params):
    rng = np.random.default_rng(shape[0])
    za = rng.normal(loc=1.0, scale=1.5, size=shape)
    zb = za + rng.normal(scale=0.5, size=shape)

    value = VicReg(**params, dtype="float64")(za, zb)

    expected = numpy_reference.vicreg(za, zb, **{**DEFAULTS, **params})
    np.testing.assert_allclose(value.numpy(), expected, rtol=1e-10)


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        # (za - zb) has two entries of +-1 out of N * D = 4.
        ("lambda_", 0.5),
        # Every std is sqrt(2) > gamma except zb's constant feature 2 (hinge 1, over
        # D = 2 features), and the two views' terms are averaged: (0 + 0.5) / 2.
        ("mu", 0.25),
        # Cov(za) = [[2, 2], [2, 2]]: off-diagonal (2^2 + 2^2) / D; Cov(zb) is diagonal.
        ("nu", 4.0),
    ],
)
def test_each_term_alone_by_hand(term, expected):
    za = np.array([[1.0, 1.0], [-1.0, -1.0]])
    zb = np.array([[1.0, 0.0], [-1.0, 0.0]])
    coefficients = {"lambda_": 0.0, "mu": 0.0, "nu": 0.0, term: 1.0}

    value = VicReg(**coefficients, gamma=1.0, epsilon=0.0, dtype="float64")(za, zb)

    np.testing.assert_allclose(value.numpy(), expected, rtol=1e-12)


def test_rejects_invalid_coefficients():
    for argument, value, bound in [
        ("lambda_", -1.0, ">= 0"),
        ("mu", -1.0, ">= 0"),
        ("nu", -0.5, ">= 0"),
        ("gamma", 0.0, "> 0"),
        ("epsilon", -1e-4, ">= 0"),
    ]:
        with pytest.raises(ValueError, match=f"{argument} must be a finite number {bound}"):
            VicReg(**{argument: value})
