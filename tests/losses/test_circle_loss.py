"""CircleLoss against a float64 NumPy loop (the paper's form), and 0.17's form."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.losses import CircleLoss
from tests.losses import metric_reference
from tests.losses.metric_fixtures import LABELS, embeddings


@pytest.mark.parametrize(
    ("distance", "gamma", "margin"),
    [("cosine", 80.0, 0.4), ("cosine", 4.0, 0.25), ("l2", 2.0, 0.4)],
)
def test_matches_the_papers_formula(distance, gamma, margin):
    x = embeddings(seed=4)
    loss = CircleLoss(
        distance=distance, gamma=gamma, margin=margin, reduction="none", dtype="float64"
    )

    terms = loss(LABELS, x).numpy()

    expected = metric_reference.circle_terms(LABELS, x, distance, gamma, margin)
    np.testing.assert_allclose(terms, expected, rtol=1e-9, atol=1e-12)
    assert terms[8] == 0.0


def test_differs_from_0_17_by_the_cross_terms():
    x = embeddings(seed=4)
    value = CircleLoss(gamma=4.0, dtype="float64")(LABELS, x).numpy()
    old = metric_reference.circle_terms(LABELS, x, "cosine", 4.0, 0.4, paper=False).mean()

    assert old > value
    np.testing.assert_allclose(
        value, metric_reference.circle_terms(LABELS, x, "cosine", 4.0, 0.4).mean(), rtol=1e-9
    )


def test_rejects_a_non_positive_gamma():
    with pytest.raises(ValueError, match="gamma must be a finite number > 0"):
        CircleLoss(gamma=0.0)
