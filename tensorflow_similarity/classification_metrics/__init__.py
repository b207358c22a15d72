"""Classification metrics of matched queries from their tp/fp/tn/fn counts at thresholds.

0.17's `F1Score`, `Precision`, `Recall`, `BinaryAccuracy`,
`FalsePositiveRate` and `NegativePredictiveValue`; each `compute(tp, fp,
tn, fn, count)` returns the metric at each distance threshold.
`make_classification_metric` resolves 0.17's names ("f1", "fpr", ...).
"""

from __future__ import annotations

from tensorflow_similarity.classification_metrics.binary_accuracy import BinaryAccuracy
from tensorflow_similarity.classification_metrics.classification_metric import (
    ClassificationMetric,
)
from tensorflow_similarity.classification_metrics.f1_score import F1Score
from tensorflow_similarity.classification_metrics.false_positive_rate import FalsePositiveRate
from tensorflow_similarity.classification_metrics.negative_predictive_value import (
    NegativePredictiveValue,
)
from tensorflow_similarity.classification_metrics.precision import Precision
from tensorflow_similarity.classification_metrics.recall import Recall
from tensorflow_similarity.classification_metrics.registry import (
    METRIC_NAMES,
    make_classification_metric,
)

__all__ = [
    "METRIC_NAMES",
    "BinaryAccuracy",
    "ClassificationMetric",
    "F1Score",
    "FalsePositiveRate",
    "NegativePredictiveValue",
    "Precision",
    "Recall",
    "make_classification_metric",
]
