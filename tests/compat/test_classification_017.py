"""0.17's classification metrics and matchers hand back tensors, and keep 0.17's error wording.

0.17.1's `ClassificationMetric.compute` returned a tensor and its matchers'
`tp`, `fp`, `tn`, `fn` were tensors in Keras' float type, so 0.17 code calls
`.numpy()` on them. The expected values here are computed independently,
with NumPy, from the same counts.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.classification_metrics import (
    BinaryAccuracy,
    F1Score,
    FalsePositiveRate,
    NegativePredictiveValue,
    Precision,
    Recall,
    make_classification_metric,
)
from tensorflow_similarity.matchers import MatchMajorityVote, MatchNearest

TP, FP, TN, FN = (np.array(v) for v in ([10.0, 20.0], [1.0, 2.0], [10.0, 9.0], [15.0, 5.0]))
REFERENCES = {
    F1Score: 2 * TP / (2 * TP + FP + FN),
    Precision: TP / (TP + FP),
    Recall: TP / (TP + FN),
    BinaryAccuracy: TP / 36,
    FalsePositiveRate: FP / (FP + TN),
    NegativePredictiveValue: TN / (TN + FN),
}


@pytest.mark.parametrize("cls", sorted(REFERENCES, key=lambda c: c.__name__))
def test_compute_returns_a_tensor_of_the_metric(cls):
    # 0.17's own tests pass float32 tensors and call `.numpy()` on the result.
    counts = {
        k: tf.constant(v, tf.float32)
        for k, v in zip(("tp", "fp", "tn", "fn"), (TP, FP, TN, FN), strict=True)
    }

    result = cls().compute(**counts, count=36)

    assert isinstance(result, tf.Tensor)
    np.testing.assert_allclose(result.numpy(), REFERENCES[cls], rtol=1e-12)


@pytest.mark.parametrize("matcher", [MatchNearest(), MatchMajorityVote()], ids=lambda m: m.name)
def test_matcher_counts_are_tensors_of_keras_float_type(matcher):
    query_labels = tf.constant([10, 20, 10, 20])
    lookup_labels = tf.constant([[10], [20], [30], [40]])
    lookup_distances = tf.constant([[1.0], [1.0], [2.0], [2.0]])
    matcher.compile(distance_thresholds=tf.constant([1.0, 2.0]))

    matcher.compute_count(query_labels, lookup_labels, lookup_distances)

    right = np.array([True, True, False, False])
    within = np.array([[1.0, 1.0, 2.0, 2.0]]).T <= np.array([[1.0, 2.0]])
    expected = {
        "tp": (right[:, None] & within).sum(0),
        "fp": (~right[:, None] & within).sum(0),
        "tn": (~right[:, None] & ~within).sum(0),
        "fn": (right[:, None] & ~within).sum(0),
    }
    for key, value in expected.items():
        got = getattr(matcher, key)
        assert isinstance(got, tf.Tensor) and got.dtype == keras.backend.floatx(), key
        np.testing.assert_array_equal(got.numpy(), value)
    assert matcher.count == 4


@pytest.mark.parametrize("attribute", ["tp", "fp", "tn", "fn", "count"])
def test_counts_read_before_compute_count_raise_0_17s_message(attribute):
    with pytest.raises(AttributeError, match=r"Matcher\.compute_count\(\) must be called before"):
        getattr(MatchNearest(), attribute)


def test_unknown_metric_name_keeps_0_17s_words():
    with pytest.raises(ValueError, match="Unknown metric name: foo, typo?") as raised:
        make_classification_metric("foo")
    assert "f1" in str(raised.value)  # and lists the names it knows
