"""Mean average precision at R."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from tensorflow_similarity.retrieval_metrics.map_at_k import MapAtK
from tensorflow_similarity.retrieval_metrics.retrieval_metric import k_at_r


@keras.saving.register_keras_serializable(package="Similarity")
class MapAtR(MapAtK):
    r"""mAP@R: average precision over each query's `R` nearest neighbours.

    $\frac{1}{R} \sum_{j=1}^{R} rel_j P@j$ with `R = r[label]`, the number of
    indexed examples of the query's class (one fewer with
    `drop_closest_lookup`). As pytorch-metric-learning's `AccuracyCalculator`
    reports it (Musgrave et al., "A Metric Learning Reality Check", ECCV
    2020); it is `MapAtK(r, clip_at_r=True)` with `k` the largest `R`.

    Args:
        r: Class id -> number of indexed examples of that class.
        k: Neighbours looked up per query; defaults to the largest `R`.
        name: Defaults to `"map@r"`.
        **kwargs: See `RetrievalMetric`.

    Example:

    >>> from tensorflow_similarity.retrieval_metrics import MapAtR
    >>> MapAtR(r={1: 2}).compute(query_labels=[1], lookup_labels=[[0, 1]])
    0.25
    """

    default_name = "map@r"
    default_canonical_name = "map@r"

    def __init__(
        self,
        r: Mapping[int, int],
        k: int | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("clip_at_r", None)
        k = k_at_r(r, k, kwargs.get("drop_closest_lookup", False))
        super().__init__(r=r, clip_at_r=True, name=name, k=k, **kwargs)
