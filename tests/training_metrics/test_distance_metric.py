"""DistanceMetric and DistanceGapMetric vs float64 loops, and over the global batch."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import training_metrics
from tensorflow_similarity.losses import TripletLoss
from tensorflow_similarity.testing import mirrored_strategy
from tensorflow_similarity.training_metrics import DistanceGapMetric, DistanceMetric


def pairwise(embeddings, distance):
    x = np.asarray(embeddings, np.float64)
    n = len(x)
    d = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if distance == "cosine":
                d[i, j] = 1.0 - x[i] @ x[j] / (np.linalg.norm(x[i]) * np.linalg.norm(x[j]))
            else:
                d[i, j] = np.sqrt(np.sum((x[i] - x[j]) ** 2))
    return d


def reference(labels, embeddings, distance, aggregate, anchor, pos_mining, neg_mining):
    """The metric of one batch with plain loops over anchors and partners."""
    d = pairwise(embeddings, distance)
    picked = []
    for i in range(len(labels)):
        if anchor == "positive":
            partners = [d[i, j] for j in range(len(labels)) if j != i and labels[j] == labels[i]]
            hardest = max if pos_mining == "hard" else min
        else:
            partners = [d[i, j] for j in range(len(labels)) if labels[j] != labels[i]]
            hardest = min if neg_mining == "hard" else max
        if partners:
            picked.append(hardest(partners))
    if not picked:
        return 0.0
    return {
        "mean": np.mean,
        "avg": np.mean,
        "max": np.max,
        "min": np.min,
        "sum": np.sum,
    }[aggregate](picked)


def batch(seed=0, n=12, dim=5, classes=3):
    rng = np.random.default_rng(seed)
    return rng.integers(0, classes, n), rng.normal(size=(n, dim)).astype("float32")


@pytest.mark.parametrize("distance", ["cosine", "l2"])
@pytest.mark.parametrize("aggregate", ["mean", "max", "min", "sum"])
@pytest.mark.parametrize(
    "anchor, pos_mining, neg_mining",
    [
        ("positive", "hard", "hard"),
        ("positive", "easy", "hard"),
        ("negative", "hard", "hard"),
        ("negative", "hard", "easy"),
    ],
)
def test_matches_loops(distance, aggregate, anchor, pos_mining, neg_mining):
    labels, embeddings = batch(1)
    metric = DistanceMetric(
        distance,
        aggregate=aggregate,
        anchor=anchor,
        positive_mining_strategy=pos_mining,
        negative_mining_strategy=neg_mining,
    )
    metric.update_state(labels, embeddings)
    expected = reference(labels, embeddings, distance, aggregate, anchor, pos_mining, neg_mining)
    np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-5, atol=1e-6)


def test_result_is_the_mean_over_batches_and_resets():
    metric = DistanceMetric("l2", aggregate="max")
    values = []
    for seed in range(3):
        labels, embeddings = batch(seed)
        metric.update_state(labels, embeddings)
        values.append(reference(labels, embeddings, "l2", "max", "positive", "hard", "hard"))
    np.testing.assert_allclose(float(metric.result()), np.mean(values), rtol=1e-5)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_gap_and_shortcuts():
    labels, embeddings = batch(2)
    gap = training_metrics.dist_gap("cosine")
    gap.update_state(labels, embeddings)
    max_pos = reference(labels, embeddings, "cosine", "max", "positive", "hard", "hard")
    min_neg = reference(labels, embeddings, "cosine", "min", "negative", "hard", "hard")
    np.testing.assert_allclose(float(gap.result()), abs(min_neg - max_pos), rtol=1e-5)
    assert isinstance(gap, DistanceGapMetric) and gap.name == "dist_gap"
    for name, aggregate, anchor in [
        ("max_pos", "max", "positive"),
        ("max_neg", "max", "negative"),
        ("avg_pos", "mean", "positive"),
        ("avg_neg", "mean", "negative"),
        ("min_pos", "min", "positive"),
        ("min_neg", "min", "negative"),
        ("sum_pos", "sum", "positive"),
        ("sum_neg", "sum", "negative"),
    ]:
        metric = getattr(training_metrics, name)("cosine")
        metric.update_state(labels, embeddings)
        expected = reference(labels, embeddings, "cosine", aggregate, anchor, "hard", "hard")
        np.testing.assert_allclose(float(metric.result()), expected, rtol=1e-5, atol=1e-6)


def test_no_partner_gives_zero_not_nan():
    metric = DistanceMetric("l2")
    metric.update_state(np.arange(4), np.eye(4, dtype="float32"))
    assert float(metric.result()) == 0.0


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="aggregate must be one of"):
        DistanceMetric(aggregate="median")
    with pytest.raises(ValueError, match="anchor must be one of"):
        DistanceMetric(anchor="pos")
    with pytest.raises(ValueError, match="one label per embedding"):
        DistanceMetric().update_state(np.arange(3), np.ones((4, 2), "float32"))
    with pytest.raises(ValueError, match=r"\[batch, features\]"):
        DistanceMetric().update_state(np.arange(3), np.ones((3, 2, 2), "float32"))
    with pytest.raises(ValueError, match="sample_weight"):
        DistanceMetric().update_state(np.arange(3), np.ones((3, 2), "float32"), np.ones(3))


def test_config_round_trip():
    metric = DistanceMetric(
        "l2", aggregate="min", anchor="negative", negative_mining_strategy="easy"
    )
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
    assert type(restored) is DistanceMetric
    assert restored.get_config() == metric.get_config()
    assert restored.distance.name == "euclidean"


@pytest.mark.parametrize("num_replicas", [2, 4])
def test_fit_under_a_strategy_reports_the_global_batch(num_replicas):
    """compile(metrics=...) then fit: the value of the whole batch, partners on other replicas."""
    rng = np.random.default_rng(3)
    labels = rng.permutation(np.repeat(np.arange(4), 4))  # positives sit on other replicas
    x = rng.normal(size=(16, 6)).astype("float32")

    def build():
        keras.utils.set_random_seed(0)
        inputs = keras.Input((6,))
        model = keras.Model(inputs, keras.layers.Dense(4)(inputs))
        model.compile(
            optimizer=keras.optimizers.SGD(0.0),
            loss=TripletLoss(),
            metrics=[DistanceMetric("l2", aggregate="max"), DistanceGapMetric("l2")],
        )
        return model

    with mirrored_strategy(num_replicas).scope():
        model = build()
    data = tf.data.Dataset.from_tensor_slices((x, labels)).batch(16)
    logs = model.fit(data, epochs=1, verbose=0).history
    embeddings = model.predict(x, verbose=0)
    max_pos = reference(labels, embeddings, "l2", "max", "positive", "hard", "hard")
    min_neg = reference(labels, embeddings, "l2", "min", "negative", "hard", "hard")
    np.testing.assert_allclose(logs["max_pos"][0], max_pos, rtol=1e-5)
    np.testing.assert_allclose(logs["dist_gap"][0], abs(min_neg - max_pos), rtol=1e-5)
    # Per replica the batch would be another: the global value is not a replica's.
    local = reference(labels[:4], embeddings[:4], "l2", "max", "positive", "hard", "hard")
    assert not np.isclose(local, max_pos)
