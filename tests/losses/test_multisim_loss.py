"""MultiSimilarityLoss against a float64 NumPy loop."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.losses import MultiSimilarityLoss
from tests.losses import metric_reference
from tests.losses.metric_fixtures import LABELS, embeddings


@pytest.mark.parametrize(
    ("distance", "alpha", "beta", "epsilon", "lmda", "center"),
    [
        ("cosine", 2.0, 40.0, 0.1, 0.5, 1.0),
        ("cosine", 1.0, 10.0, 0.5, 0.3, 1.0),
        ("l2", 2.0, 5.0, 0.3, 0.5, 1.2),
        ("sql2", 1.0, 3.0, 1.0, 0.5, 2.0),
    ],
)
def test_matches_reference(distance, alpha, beta, epsilon, lmda, center):
    x = embeddings(seed=5)
    loss = MultiSimilarityLoss(
        distance, alpha, beta, epsilon, lmda, center, reduction="none", dtype="float64"
    )

    terms = loss(LABELS, x).numpy()

    expected = metric_reference.multisim_terms(
        LABELS, x, distance, alpha, beta, epsilon, lmda, center
    )
    np.testing.assert_allclose(terms, expected, rtol=1e-9, atol=1e-12)
    assert np.count_nonzero(expected) >= 5


def test_rejects_non_positive_scales():
    for name in ("alpha", "beta"):
        with pytest.raises(ValueError, match=f"{name} must be a finite number > 0"):
            MultiSimilarityLoss(**{name: -1.0})
