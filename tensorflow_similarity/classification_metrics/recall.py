"""Recall of the matches."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.classification_metrics.classification_metric import (
    ClassificationMetric,
    ratio,
)


@keras.saving.register_keras_serializable(package="Similarity")
class Recall(ClassificationMetric):
    r"""The fraction of right labels that are accepted: $\frac{TP}{TP + FN}$.

    Args:
        name: Defaults to `"recall"`.
        **kwargs: See `ClassificationMetric`.

    Example:

    >>> from tensorflow_similarity.classification_metrics import Recall
    >>> Recall().compute(tp=[3], fp=[1], tn=[0], fn=[1], count=5).numpy().tolist()
    [0.75]
    """

    default_name = "recall"
    default_canonical_name = "recall"

    def _compute(self, tp, fp, tn, fn, count) -> np.ndarray:
        return ratio(tp, tp + fn)
