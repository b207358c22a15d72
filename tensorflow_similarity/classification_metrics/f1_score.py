"""F1 score of the matches."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.classification_metrics.classification_metric import (
    ClassificationMetric,
    ratio,
)


@keras.saving.register_keras_serializable(package="Similarity")
class F1Score(ClassificationMetric):
    r"""The harmonic mean of precision and recall: $2 \frac{P R}{P + R}$.

    Args:
        name: Defaults to `"f1"`.
        **kwargs: See `ClassificationMetric`.

    Example:

    >>> from tensorflow_similarity.classification_metrics import F1Score
    >>> F1Score().compute(tp=[3], fp=[1], tn=[0], fn=[3], count=7).numpy().tolist()
    [0.6]
    """

    default_name = "f1"
    default_canonical_name = "f1_score"

    def _compute(self, tp, fp, tn, fn, count) -> np.ndarray:
        recall, precision = ratio(tp, tp + fn), ratio(tp, tp + fp)
        return ratio(2 * recall * precision, recall + precision)
