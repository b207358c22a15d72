"""0.17's ways of writing and calling metric losses: `MetricLoss(fn, ...)`, the functional
losses, their `**kwargs` (`remove_diagonal`), `losses.utils` and `algebra`.

References are float64 NumPy loops over anchors and pairs, written from 0.17's
documented semantics.
"""

from __future__ import annotations

import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.algebra import build_masks, masked_max, masked_min
from tensorflow_similarity.distances import EuclideanDistance
from tensorflow_similarity.losses import (
    XBM,
    CircleLoss,
    MetricLoss,
    MultiNegativesRankLoss,
    MultiSimilarityLoss,
    PNLoss,
    SoftNearestNeighborLoss,
    TripletLoss,
)
from tensorflow_similarity.losses.circle_loss import circle_loss
from tensorflow_similarity.losses.multinegrank_loss import multineg_ranking_loss
from tensorflow_similarity.losses.multisim_loss import multisimilarity_loss
from tensorflow_similarity.losses.pn_loss import pn_loss
from tensorflow_similarity.losses.softnn_loss import soft_nn_loss
from tensorflow_similarity.losses.triplet_loss import triplet_loss
from tensorflow_similarity.losses.utils import (
    compute_loss,
    logsumexp,
    negative_distances,
    positive_distances,
)
from tensorflow_similarity.testing import run_on_replicas
from tests.losses import metric_reference
from tests.losses.metric_fixtures import LABELS, embeddings


def hard_gap_loss(query_labels, query_embeddings, key_labels, key_embeddings, distance, margin):
    """A custom loss written as 0.17's documentation shows, on 0.17's helpers."""
    d = distance(query_embeddings, key_embeddings)
    positive, negative = build_masks(query_labels, key_labels, batch_size=tf.size(query_labels))
    d_ap, _ = positive_distances("hard", d, positive)
    d_an, _ = negative_distances("hard", d, negative, positive)
    return compute_loss(d_ap, d_an, margin)


def hard_gap_reference(labels, x, margin):
    """0.17's values: an anchor with no positive takes its row's smallest distance - 1e-6."""
    x = np.float64(x)
    d = np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    terms = []
    for a in range(len(labels)):
        positives = [d[a, j] for j in range(len(labels)) if j != a and labels[j] == labels[a]]
        negatives = [d[a, j] for j in range(len(labels)) if labels[j] != labels[a]]
        d_ap = max(positives) if positives else min(d[a]) - 1e-6
        terms.append(max(d_ap - min(negatives) + margin, 0.0))
    return np.array(terms)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "none", "auto"])
def test_metric_loss_wraps_a_017_function_as_its_numpy_reference(reduction):
    x = embeddings(seed=1)
    # 0.17's positional order: fn, reduction, name; then the function's keyword arguments.
    loss = MetricLoss(hard_gap_loss, reduction, "hard_gap", distance="l2", margin=0.5)

    value = loss(LABELS, x).numpy()

    terms = hard_gap_reference(LABELS, x, 0.5)
    expected = {"sum": terms.sum(), "none": terms}.get(reduction, terms.mean())
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    assert loss.name == "hard_gap"


def test_metric_loss_of_a_function_under_two_replicas_is_the_global_batch_value():
    x = embeddings(seed=2).astype(np.float32)
    loss = MetricLoss(hard_gap_loss, distance="l2", margin=0.5)

    run = run_on_replicas(tf.function(loss), (LABELS, x), [5, len(x) - 5], traced=False)

    total = run.summed()
    np.testing.assert_allclose(total, hard_gap_reference(LABELS, x, 0.5).mean(), rtol=1e-5)


FUNCTIONAL = {
    "triplet": (triplet_loss, TripletLoss, {}),
    "triplet_easy_margin": (
        triplet_loss,
        TripletLoss,
        {"positive_mining_strategy": "easy", "negative_mining_strategy": "hard", "margin": 0.3},
    ),
    "pn": (pn_loss, PNLoss, {}),
    "circle": (circle_loss, CircleLoss, {"gamma": 16.0}),
    "multisim": (multisimilarity_loss, MultiSimilarityLoss, {"beta": 10.0}),
    "softnn": (soft_nn_loss, SoftNearestNeighborLoss, {"temperature": 0.5}),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
@pytest.mark.parametrize("remove_diagonal", [True, False])
def test_functional_losses_are_their_class_terms(name, remove_diagonal):
    function, cls, kwargs = FUNCTIONAL[name]
    x = embeddings(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # softnn's remove_diagonal=False warns
        loss = cls("cosine", reduction="none", remove_diagonal=remove_diagonal, **kwargs)
        terms = function(
            LABELS[:, None], x, LABELS, x, "cosine", remove_diagonal=remove_diagonal, **kwargs
        )
        wrapped = MetricLoss(function, distance="cosine", remove_diagonal=remove_diagonal, **kwargs)
        wrapped_value = wrapped(LABELS, x).numpy()

    expected = loss(LABELS, x).numpy()
    np.testing.assert_allclose(np.reshape(terms.numpy(), [-1]), expected, rtol=1e-6, atol=1e-7)
    # 0.17's functions return [n, 1] terms, soft_nn_loss [n].
    assert terms.shape == ((len(LABELS),) if name == "softnn" else (len(LABELS), 1))
    np.testing.assert_allclose(wrapped_value, expected.mean(), rtol=1e-6)


def test_functional_triplet_is_the_numpy_reference():
    x = embeddings(seed=4)
    terms = triplet_loss(LABELS, x, LABELS, x, "cosine")

    expected = metric_reference.triplet_terms(LABELS, x, "cosine", "hard", "semi-hard", None)
    np.testing.assert_allclose(terms.numpy()[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_multineg_ranking_loss_is_its_class_terms():
    rng = np.random.default_rng(5)
    queries, keys = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))

    terms = multineg_ranking_loss(queries, keys, 2.0, "inner_product")

    expected = metric_reference.multineg_rank(queries, keys, 2.0)
    np.testing.assert_allclose(terms.numpy().mean(), expected, rtol=1e-5)
    np.testing.assert_allclose(
        MultiNegativesRankLoss(scale=2.0)(queries, keys).numpy(), expected, rtol=1e-5
    )
    with pytest.raises(ValueError, match="inner product"):
        multineg_ranking_loss(queries, keys, 2.0, "cosine")


def test_remove_diagonal_false_makes_each_anchor_its_own_positive():
    x = embeddings(seed=6)
    d = np.array([[metric_reference.cosine(a, b) for b in x] for a in x])
    terms = []
    for a in range(len(LABELS)):
        # Easy positive mining then always picks the anchor itself, at distance 0.
        d_an = min(d[a, j] for j in range(len(LABELS)) if LABELS[j] != LABELS[a])
        terms.append(math.log1p(math.exp(0.0 - d_an)))

    loss = TripletLoss(
        positive_mining_strategy="easy", negative_mining_strategy="hard", remove_diagonal=False
    )

    np.testing.assert_allclose(loss(LABELS, x).numpy(), np.mean(terms), rtol=1e-5)
    assert TripletLoss.from_config(loss.get_config()).remove_diagonal is False


def test_softnn_remove_diagonal_false_warns_and_keeps_the_loss():
    x = embeddings(seed=7)
    with pytest.warns(UserWarning, match="20.72"):
        loss = SoftNearestNeighborLoss(remove_diagonal=False)

    np.testing.assert_allclose(
        loss(LABELS, x).numpy(), SoftNearestNeighborLoss()(LABELS, x).numpy(), rtol=1e-7
    )


def test_keyword_arguments_a_loss_cannot_use_are_refused_when_built():
    with pytest.raises(TypeError, match="unexpected keyword"):
        TripletLoss(remove_diagonals=False)
    with pytest.raises(TypeError, match="there is none"):
        MetricLoss(distance="cosine", margin=1.0)
    with pytest.raises(TypeError, match="loss function"):
        MetricLoss("not a function")
    with pytest.raises(TypeError, match="distance=..."):
        MetricLoss(EuclideanDistance())


def test_function_losses_round_trip_through_keras_serialisation():
    x = embeddings(seed=8)
    loss = MetricLoss(triplet_loss, "sum", "wrapped", distance="l2", margin=0.2)

    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))

    assert rebuilt.fn is triplet_loss and rebuilt.reduction == "sum"
    np.testing.assert_allclose(rebuilt(LABELS, x).numpy(), loss(LABELS, x).numpy(), rtol=1e-7)


def test_function_returning_other_than_one_term_per_anchor_is_an_error():
    loss = MetricLoss(lambda ql, qe, kl, ke: tf.reduce_sum(qe))

    with pytest.raises(ValueError, match=r"one term per\s+query"):
        loss(LABELS, embeddings())


def test_017_helpers_match_numpy():
    rng = np.random.default_rng(9)
    d = rng.random((4, 5))
    mask = rng.random((4, 5)) < 0.5
    mask[2] = False  # an empty row

    values, indices = masked_max(d, mask)
    low_values, low_indices = masked_min(d, mask)

    for row in range(4):
        picked = np.where(mask[row])[0]
        if picked.size:
            assert values.numpy()[row, 0] == pytest.approx(d[row, picked].max())
            assert indices.numpy()[row] == picked[np.argmax(d[row, picked])]
            assert low_values.numpy()[row, 0] == pytest.approx(d[row, picked].min())
            assert low_indices.numpy()[row] == picked[np.argmin(d[row, picked])]
        else:
            assert values.numpy()[row, 0] == pytest.approx(d[row].min() - 1e-6)
            assert low_values.numpy()[row, 0] == pytest.approx(d[row].max() + 1e-6)
            assert indices.numpy()[row] == low_indices.numpy()[row] == 0
    expected = [
        math.log(1.0 + sum(math.exp(d[r, j]) for j in range(5) if mask[r, j])) for r in range(4)
    ]
    np.testing.assert_allclose(logsumexp(d, mask).numpy()[:, 0], expected, rtol=1e-7)
    positive, negative = build_masks([1, 1, 2], [1, 1, 2, 1], batch_size=3, remove_diagonal=True)
    np.testing.assert_array_equal(positive.numpy(), [[0, 1, 0, 1], [1, 0, 0, 1], [0, 0, 0, 0]])
    np.testing.assert_array_equal(negative.numpy(), [[0, 0, 1, 0], [0, 0, 1, 0], [1, 1, 0, 1]])


def test_softnn_remove_diagonal_false_worked_number():
    # Migration guide ("0.17's module paths, functions and keywords"): 0.17 added -log(1e-9)
    # for each anchor alone in its class; here remove_diagonal=False is remove_diagonal=True.
    rng = np.random.default_rng(17)
    z = rng.normal(size=(8, 4))
    z = (z / np.linalg.norm(z, axis=1, keepdims=True)).astype(np.float32)
    labels = np.array([0, 0, 1, 1, 2, 2, 3, 4])
    d = ((np.float64(z)[:, None, :] - np.float64(z)[None, :, :]) ** 2).sum(-1)
    terms_017 = []
    for a in range(8):
        others = np.exp(-d[a])
        others[a] = 0.0
        same = labels == labels[a]  # the anchor itself included
        terms_017.append(-math.log(1e-9 + others[same].sum() / others.sum()))

    with pytest.warns(UserWarning):
        ours = float(SoftNearestNeighborLoss(remove_diagonal=False)(labels, z))

    assert np.mean(terms_017) == pytest.approx(6.9085, abs=1e-4)
    assert ours == pytest.approx(1.7277, abs=1e-4)


def test_xbm_wraps_a_0_17_loss_function():
    # 0.17: XBM(MetricLoss(fn), memory_size); its memory keys reach fn as keys.
    first, second = embeddings(seed=4), embeddings(seed=5)
    wrapped = XBM(MetricLoss(triplet_loss, distance="cosine"), memory_size=20, warmup_steps=0)
    built_in = XBM(TripletLoss("cosine"), memory_size=20, warmup_steps=0)

    values = [(wrapped(LABELS, x).numpy(), built_in(LABELS, x).numpy()) for x in (first, second)]

    # The second batch also mines the first one's keys, in both.
    for got, expected in values:
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert int(wrapped.memory_count.numpy()) == int(built_in.memory_count.numpy()) == 20
    with pytest.raises(ValueError, match="MetricLoss\\(fn\\)"):
        XBM(MetricLoss(distance="cosine"), memory_size=4)
