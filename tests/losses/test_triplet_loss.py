"""TripletLoss against a float64 NumPy loop, for every mining choice, margin and distance."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tensorflow_similarity.losses import TripletLoss
from tests.losses import metric_reference
from tests.losses.metric_fixtures import LABELS, embeddings

CASES = list(itertools.product(["hard", "easy"], ["semi-hard", "hard", "easy"], [None, 0.3]))


@pytest.mark.parametrize(("positive", "negative", "margin"), CASES)
def test_matches_reference_for_every_mining_choice(positive, negative, margin):
    x = embeddings(seed=1)
    loss = TripletLoss(
        positive_mining_strategy=positive,
        negative_mining_strategy=negative,
        margin=margin,
        reduction="none",
        dtype="float64",
    )

    terms = loss(LABELS, x).numpy()

    expected = metric_reference.triplet_terms(LABELS, x, "cosine", positive, negative, margin)
    np.testing.assert_allclose(terms, expected, rtol=1e-9, atol=1e-12)
    assert terms[8] == 0.0  # the singleton anchor


@pytest.mark.parametrize("distance", ["l2", "sql2", "l1", "snr"])
def test_matches_reference_for_every_distance(distance):
    x = 2.0 * embeddings(seed=2)
    loss = TripletLoss(distance=distance, margin=0.5)

    value = loss(LABELS, x).numpy()

    terms = metric_reference.triplet_terms(LABELS, x, distance, "hard", "semi-hard", 0.5)
    np.testing.assert_allclose(value, terms.mean(), rtol=1e-9)


def test_semi_hard_falls_back_to_the_farthest_negative():
    # Anchor 0: its positive is at distance 2 (opposite), both negatives closer.
    x = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    labels = np.array([0, 0, 1, 1])
    loss = TripletLoss(margin=0.0, reduction="none", dtype="float64")

    terms = loss(labels, x).numpy()

    # d_ap = 2, farthest negative is [0, 1] at distance 1.
    np.testing.assert_allclose(terms[0], 1.0, rtol=1e-12)


def test_rejects_unknown_strategies_and_margins():
    with pytest.raises(ValueError, match="positive_mining_strategy must be one of"):
        TripletLoss(positive_mining_strategy="semi-hard")
    with pytest.raises(ValueError, match="negative_mining_strategy must be one of"):
        TripletLoss(negative_mining_strategy="hardest")
    with pytest.raises(ValueError, match="margin must be a finite number"):
        TripletLoss(margin="1")
    with pytest.raises(ValueError, match="Unknown distance"):
        TripletLoss(distance="hamming")
