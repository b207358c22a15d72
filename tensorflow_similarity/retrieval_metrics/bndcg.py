"""Binary normalised discounted cumulative gain."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.retrieval_metrics.retrieval_metric import RetrievalMetric


@keras.saving.register_keras_serializable(package="Similarity")
class BNDCG(RetrievalMetric):
    r"""Binary NDCG@K: rank-discounted relevant neighbours over the best order of the same.

    $DCG = \sum_{j=1}^{k} \frac{rel_j}{\log_2(j + 1)}$ and the ideal DCG is
    the same sum over the `k` relevances sorted descending, as 0.17 computed
    it: the ideal is taken over the retrieved `k`, not over the whole index,
    so a query is not penalised for relevant examples beyond its `k`
    nearest. A query with no relevant neighbour scores 0.

    Args:
        name: Defaults to `"ndcg"`.
        **kwargs: See `RetrievalMetric`.

    Example:

    >>> from tensorflow_similarity.retrieval_metrics import BNDCG
    >>> round(BNDCG(k=2).compute(query_labels=[1], lookup_labels=[[0, 1]]), 4)
    0.6309
    """

    default_name = "ndcg"
    default_canonical_name = "ndcg@k"

    def _per_query(self, relevant: np.ndarray, query_labels: np.ndarray) -> np.ndarray:
        relevant = relevant[:, : self.k].astype(np.float64)
        discounts = np.log2(np.arange(2, relevant.shape[1] + 2))
        dcg = (relevant / discounts).sum(axis=1)
        ideal = (-np.sort(-relevant, axis=1) / discounts).sum(axis=1)
        return np.divide(dcg, ideal, out=np.zeros_like(dcg), where=ideal > 0)
