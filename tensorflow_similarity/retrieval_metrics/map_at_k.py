"""Mean average precision at K."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.retrieval_metrics.precision_at_k import PrecisionAtK


@keras.saving.register_keras_serializable(package="Similarity")
class MapAtK(PrecisionAtK):
    r"""mAP@K: the mean over queries of the average precision of the `k` nearest.

    $AP_i@K = \frac{1}{R_i} \sum_{j=1}^{K} rel_{ij} P_i@j$, with `P_i@j` the
    precision of the first `j` neighbours and `R_i` the number of indexed
    examples of the query's class, `r[label]` (`k` without `r`). It rewards
    relevant neighbours ranked first. With every indexed example looked up
    and `r` the class sizes, it is the classic average precision; with
    `clip_at_r=True` it is mAP@R (see `MapAtR`).

    Args:
        r: Class id -> number of indexed examples, or `None`. Defaults to
            `None`.
        clip_at_r: Whether only the first `r[label]` neighbours count.
            Defaults to False.
        name: Defaults to `"map"`.
        **kwargs: See `RetrievalMetric`; unlike 0.17, `average="macro"` is
            accepted.

    Example:

    >>> from tensorflow_similarity.retrieval_metrics import MapAtK
    >>> MapAtK(k=3, r={1: 2}).compute(query_labels=[1], lookup_labels=[[1, 0, 1]])
    0.8333333333333333
    """

    default_name = "map"
    default_canonical_name = "map@k"

    def _gains(self, relevant: np.ndarray) -> np.ndarray:
        relevant = relevant.astype(np.float64)
        precision_at_j = np.cumsum(relevant, axis=1) / np.arange(1, relevant.shape[1] + 1)
        return relevant * precision_at_j
