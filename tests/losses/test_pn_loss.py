"""PNLoss against a float64 NumPy loop."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.losses import PNLoss
from tests.losses import metric_reference
from tests.losses.metric_fixtures import LABELS, embeddings


@pytest.mark.parametrize(
    ("distance", "positive", "negative", "margin"),
    [
        ("cosine", "hard", "semi-hard", None),
        ("cosine", "easy", "hard", 0.2),
        ("l2", "hard", "easy", 1.0),
        ("snr", "easy", "semi-hard", None),
    ],
)
def test_matches_reference(distance, positive, negative, margin):
    x = embeddings(seed=3)
    loss = PNLoss(distance, positive, negative, margin, reduction="none", dtype="float64")

    terms = loss(LABELS, x).numpy()

    expected = metric_reference.triplet_terms(
        LABELS, x, distance, positive, negative, margin, pn=True
    )
    np.testing.assert_allclose(terms, expected, rtol=1e-9, atol=1e-12)


def test_differs_from_triplet_when_the_positive_is_closer_to_the_negative():
    x = np.array([[1.0, 0.0], [0.0, 1.0], [0.3, 1.0], [-1.0, 0.0]])
    labels = np.array([0, 0, 1, 1])
    pn = metric_reference.triplet_terms(labels, x, "l2", "hard", "hard", None, pn=True)
    triplet = metric_reference.triplet_terms(labels, x, "l2", "hard", "hard", None)
    value = PNLoss("l2", "hard", "hard", reduction="none", dtype="float64")(labels, x).numpy()

    np.testing.assert_allclose(value, pn, rtol=1e-9)
    assert not np.allclose(pn, triplet)
