"""Binary accuracy of the matches."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.classification_metrics.classification_metric import (
    ClassificationMetric,
    ratio,
)


@keras.saving.register_keras_serializable(package="Similarity")
class BinaryAccuracy(ClassificationMetric):
    r"""The fraction of queries accepted with the right label: $\frac{TP}{count}$.

    Precision among accepted queries times the fraction of queries accepted,
    as 0.17 defines it: a rejected query is never counted as correct.

    Args:
        name: Defaults to `"binary_accuracy"`.
        **kwargs: See `ClassificationMetric`.

    Example:

    >>> from tensorflow_similarity.classification_metrics import BinaryAccuracy
    >>> BinaryAccuracy().compute(tp=[3], fp=[1], tn=[0], fn=[1], count=5).numpy().tolist()
    [0.6]
    """

    default_name = "binary_accuracy"
    default_canonical_name = "binary_accuracy"

    def _compute(self, tp, fp, tn, fn, count) -> np.ndarray:
        return ratio(tp, np.full_like(tp, count))
