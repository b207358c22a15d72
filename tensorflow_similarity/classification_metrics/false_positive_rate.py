"""False positive rate of the matches."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.classification_metrics.classification_metric import (
    ClassificationMetric,
    ratio,
)


@keras.saving.register_keras_serializable(package="Similarity")
class FalsePositiveRate(ClassificationMetric):
    r"""The fraction of wrong labels that are accepted: $\frac{FP}{FP + TN}$; lower is better.

    Args:
        name: Defaults to `"fpr"`.
        **kwargs: See `ClassificationMetric`.

    Example:

    >>> from tensorflow_similarity.classification_metrics import FalsePositiveRate
    >>> FalsePositiveRate().compute(tp=[3], fp=[1], tn=[3], fn=[1], count=8).numpy().tolist()
    [0.25]
    """

    default_name = "fpr"
    default_canonical_name = "false_positive_rate"
    default_maximize = False

    def _compute(self, tp, fp, tn, fn, count) -> np.ndarray:
        return ratio(fp, fp + tn)
