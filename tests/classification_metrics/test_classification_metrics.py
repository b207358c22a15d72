"""Classification metrics from matcher counts against scikit-learn and hand-computed values."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from sklearn.metrics import confusion_matrix, f1_score, precision_score, recall_score

from tensorflow_similarity.classification_metrics import (
    METRIC_NAMES,
    BinaryAccuracy,
    ClassificationMetric,
    F1Score,
    FalsePositiveRate,
    NegativePredictiveValue,
    Precision,
    Recall,
    make_classification_metric,
)
from tensorflow_similarity.matchers import MatchNearest

THRESHOLDS = [0.05, 0.3, 0.5, 0.8, 2.0]


def _counts(seed=0, n=200):
    rng = np.random.default_rng(seed)
    query_labels = rng.integers(0, 3, n)
    lookup_labels = rng.integers(0, 3, (n, 2))
    distances = np.sort(rng.random((n, 2)) + 0.1, axis=1)
    matcher = MatchNearest()
    matcher.compile(THRESHOLDS)
    matcher.compute_count(query_labels, lookup_labels, distances)
    right = lookup_labels[:, 0] == query_labels
    return matcher, right, distances[:, 0]


SKLEARN = {
    Precision: lambda y, p: precision_score(y, p, zero_division=0),
    Recall: lambda y, p: recall_score(y, p, zero_division=0),
    F1Score: lambda y, p: f1_score(y, p, zero_division=0),
    FalsePositiveRate: lambda y, p: _fpr(confusion_matrix(y, p, labels=[False, True])),
    NegativePredictiveValue: lambda y, p: _npv(confusion_matrix(y, p, labels=[False, True])),
    BinaryAccuracy: lambda y, p: np.sum(y & p) / len(y),
}


def _fpr(matrix):
    (tn, fp), _ = matrix
    return fp / (fp + tn) if fp + tn else 0.0


def _npv(matrix):
    (tn, _), (fn, _) = matrix
    return tn / (tn + fn) if tn + fn else 0.0


@pytest.mark.parametrize("cls", sorted(SKLEARN, key=lambda c: c.__name__))
def test_against_sklearn_at_each_threshold(cls):
    matcher, right, distances = _counts()
    got = cls().compute(matcher.tp, matcher.fp, matcher.tn, matcher.fn, matcher.count)
    expected = [SKLEARN[cls](right, distances <= t) for t in THRESHOLDS]
    if cls is Precision:  # nothing accepted below the smallest distance (0.1): precision 1
        assert expected[0] == 0.0
        expected[0] = 1.0
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_hand_computed():
    tp, fp, tn, fn = [2.0], [1.0], [3.0], [4.0]
    assert F1Score().compute(tp, fp, tn, fn, 10).numpy().tolist() == pytest.approx(
        [2 * (2 / 3 * 2 / 6) / (2 / 3 + 2 / 6)]
    )
    assert Precision().compute(tp, fp, tn, fn, 10).numpy().tolist() == pytest.approx([2 / 3])
    assert Recall().compute(tp, fp, tn, fn, 10).numpy().tolist() == pytest.approx([2 / 6])
    assert BinaryAccuracy().compute(tp, fp, tn, fn, 10).numpy().tolist() == pytest.approx([0.2])
    assert FalsePositiveRate().compute(tp, fp, tn, fn, 10).numpy().tolist() == pytest.approx([0.25])
    assert NegativePredictiveValue().compute(tp, fp, tn, fn, 10).numpy().tolist() == pytest.approx(
        [3 / 7]
    )
    zero = [0.0]
    assert F1Score().compute(zero, zero, zero, zero, 0).numpy().tolist() == [0.0]  # 0/0 is 0


def test_directions_as_in_0_17():
    assert not FalsePositiveRate().maximize and F1Score().maximize
    assert not Precision().increasing and Recall().increasing


def test_names_and_config():
    for name, cls in METRIC_NAMES.items():
        metric = make_classification_metric(name.upper())
        assert type(metric) is cls and metric.name == name
        rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
        assert type(rebuilt) is cls and rebuilt.get_config() == metric.get_config()
    f1 = F1Score()
    assert make_classification_metric(f1, name="f1@0.5") is f1 and f1.name == "f1@0.5"
    with pytest.raises(ValueError, match="Unknown metric name: f2, typo"):
        make_classification_metric("f2")
    assert issubclass(F1Score, ClassificationMetric)


def test_counts_of_another_shape_are_refused():
    with pytest.raises(ValueError, match="one value per threshold"):
        F1Score().compute([1, 2], [1], [1], [1], 3)
