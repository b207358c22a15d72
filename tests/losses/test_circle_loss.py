"""CircleLoss against a float64 NumPy loop (the paper's form), and 0.17's form."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

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


def finite_difference_gradient(f, x, step=1e-6):
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += step
        down[index] -= step
        grad[index] = (f(up) - f(down)) / (2 * step)
    return grad


@pytest.mark.parametrize("detach_weights", [False, True])
def test_the_gradient_flows_through_the_weights_unless_they_are_detached(detach_weights):
    x = np.float64(embeddings(seed=4))
    loss = CircleLoss(gamma=4.0, reduction="sum", dtype="float64", detach_weights=detach_weights)
    tensor = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        value = loss(LABELS, tensor)
    grad = tape.gradient(value, tensor).numpy()

    def reference(weights_at=None):
        return lambda v: metric_reference.circle_terms(
            LABELS, v, "cosine", 4.0, 0.4, weights_at=weights_at
        ).sum()

    np.testing.assert_allclose(value.numpy(), reference()(x), rtol=1e-9)
    expected = finite_difference_gradient(reference(x if detach_weights else None), x)
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-8)
    other = finite_difference_gradient(reference(None if detach_weights else x), x)
    assert np.abs(grad - other).max() > 1e-2 * np.abs(other).max()  # the two really differ


def test_detach_weights_round_trips_in_the_config():
    loss = CircleLoss(detach_weights=True)
    assert CircleLoss.from_config(loss.get_config()).detach_weights is True
    with pytest.raises(TypeError, match="detach_weights must be True or False"):
        CircleLoss(detach_weights="yes")
