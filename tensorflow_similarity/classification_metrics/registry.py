"""Classification metrics by name, as `calibrate(calibration_metric="f1")` takes them."""

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

# 0.17's names; its misspelt "negative_predicitve_value" is kept as an alias.
METRIC_NAMES: dict[str, type[ClassificationMetric]] = {
    "recall": Recall,
    "precision": Precision,
    "f1": F1Score,
    "f1score": F1Score,
    "f1_score": F1Score,
    "binary_accuracy": BinaryAccuracy,
    "npv": NegativePredictiveValue,
    "negative_predictive_value": NegativePredictiveValue,
    "negative_predicitve_value": NegativePredictiveValue,
    "fpr": FalsePositiveRate,
    "false_positive_rate": FalsePositiveRate,
}


def make_classification_metric(
    metric: ClassificationMetric | str, name: str = ""
) -> ClassificationMetric:
    """Returns the metric named `metric` (named as given), or `metric` itself.

    Args:
        metric: A `ClassificationMetric` or one of the names of
            `METRIC_NAMES` (case-insensitive).
        name: A name to give the metric; defaults to the one passed.

    Returns:
        A `ClassificationMetric`.

    Raises:
        ValueError: If the name is unknown (the message lists the names).
    """
    if isinstance(metric, str):
        key = metric.strip().lower()
        if key not in METRIC_NAMES:
            raise ValueError(
                f"Unknown metric name: {metric}, typo? Pass a ClassificationMetric or one "
                f"of {sorted(METRIC_NAMES)}."
            )
        metric = METRIC_NAMES[key](name=key)
    elif not isinstance(metric, ClassificationMetric):
        raise ValueError(
            f"Expected a ClassificationMetric or its name; got {type(metric).__name__}."
        )
    if name:
        metric.name = name
    return metric
