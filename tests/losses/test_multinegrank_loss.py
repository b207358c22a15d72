"""MultiNegativesRankLoss against a float64 NumPy loop."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.losses import MultiNegativesRankLoss
from tests.losses import metric_reference


@pytest.mark.parametrize("scale", [1.0, 20.0])
def test_matches_reference(scale):
    rng = np.random.default_rng(8)
    q = rng.normal(size=(6, 4))
    k = q + 0.3 * rng.normal(size=(6, 4))
    q, k = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in (q, k))

    value = MultiNegativesRankLoss(scale=scale, dtype="float64")(q, k).numpy()

    np.testing.assert_allclose(value, metric_reference.multineg_rank(q, k, scale), rtol=1e-9)


def test_requires_the_inner_product():
    with pytest.raises(ValueError, match="inner product"):
        MultiNegativesRankLoss(distance="cosine")
    assert MultiNegativesRankLoss(distance="ip").get_config()["scale"] == 20.0
