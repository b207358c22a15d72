"""Negative predictive value of the matches."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.classification_metrics.classification_metric import (
    ClassificationMetric,
    ratio,
)


@keras.saving.register_keras_serializable(package="Similarity")
class NegativePredictiveValue(ClassificationMetric):
    r"""The fraction of rejected matches whose label was wrong: $\frac{TN}{TN + FN}$.

    Args:
        name: Defaults to `"npv"`.
        **kwargs: See `ClassificationMetric`.

    Example:

    >>> from tensorflow_similarity.classification_metrics import NegativePredictiveValue
    >>> NegativePredictiveValue().compute(tp=[3], fp=[1], tn=[3], fn=[1], count=8).numpy().tolist()
    [0.75]
    """

    default_name = "npv"
    default_canonical_name = "negative_predictive_value"

    def _compute(self, tp, fp, tn, fn, count) -> np.ndarray:
        return ratio(tn, tn + fn)
