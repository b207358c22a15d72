"""Precision of the matches."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.classification_metrics.classification_metric import (
    ClassificationMetric,
    ratio,
)


@keras.saving.register_keras_serializable(package="Similarity")
class Precision(ClassificationMetric):
    r"""The fraction of accepted matches that are right: $\frac{TP}{TP + FP}$.

    When nothing is accepted at the first (smallest) threshold of several,
    precision there is 1, as in the usual precision-recall curve that starts
    at (recall 0, precision 1); 0.17 did the same.

    Args:
        name: Defaults to `"precision"`.
        **kwargs: See `ClassificationMetric`.

    Example:

    >>> from tensorflow_similarity.classification_metrics import Precision
    >>> Precision().compute(tp=[0, 3], fp=[0, 1], tn=[4, 0], fn=[3, 3], count=7).numpy().tolist()
    [1.0, 0.75]
    """

    default_name = "precision"
    default_canonical_name = "precision"
    default_increasing = False

    def _compute(self, tp, fp, tn, fn, count) -> np.ndarray:
        precision = ratio(tp, tp + fp)
        if len(precision) > 1 and tp[0] + fp[0] == 0:
            precision[0] = 1.0
        return precision
