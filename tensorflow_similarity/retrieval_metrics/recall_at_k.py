"""Recall@K as metric learning defines it."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.retrieval_metrics.retrieval_metric import RetrievalMetric


@keras.saving.register_keras_serializable(package="Similarity")
class RecallAtK(RetrievalMetric):
    """Recall@K: 1 for a query with any relevant neighbour among its `k` nearest, else 0.

    Args:
        name: Defaults to `"recall"` (`.name` is `"recall@k"`).
        **kwargs: `k`, `distance_threshold`, `average`,
            `drop_closest_lookup`, `canonical_name`: see `RetrievalMetric`.

    Example:

    >>> from tensorflow_similarity.retrieval_metrics import RecallAtK
    >>> RecallAtK(k=2).compute(query_labels=[1, 2], lookup_labels=[[0, 1], [0, 0]])
    0.5
    """

    default_name = "recall"
    default_canonical_name = "recall@k"

    def _per_query(self, relevant: np.ndarray, query_labels: np.ndarray) -> np.ndarray:
        return relevant[:, : self.k].any(axis=1).astype(np.float64)
