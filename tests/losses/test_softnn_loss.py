"""SoftNearestNeighborLoss against a float64 NumPy loop."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import SoftNearestNeighborLoss
from tests.losses import metric_reference
from tests.losses.metric_fixtures import LABELS, embeddings


@pytest.mark.parametrize(
    ("distance", "temperature"), [("sql2", 1.0), ("sql2", 0.1), ("cosine", 0.5), ("l1", 2.0)]
)
def test_matches_reference(distance, temperature):
    x = embeddings(seed=6)
    loss = SoftNearestNeighborLoss(distance, temperature, reduction="none", dtype="float64")

    terms = loss(LABELS, x).numpy()

    expected = metric_reference.softnn_terms(LABELS, x, distance, temperature)
    np.testing.assert_allclose(terms, expected, rtol=1e-9, atol=1e-12)


def test_stays_finite_when_every_exponential_underflows():
    x = tf.constant(100.0 * embeddings(seed=6), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = SoftNearestNeighborLoss(temperature=0.01)(LABELS, x)
    grad = tape.gradient(value, x)

    assert np.isfinite(value.numpy()) and value.numpy() > 0
    assert np.all(np.isfinite(grad.numpy()))
