"""R-precision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras

from tensorflow_similarity.retrieval_metrics.precision_at_k import PrecisionAtK
from tensorflow_similarity.retrieval_metrics.retrieval_metric import k_at_r


@keras.saving.register_keras_serializable(package="Similarity")
class RPrecision(PrecisionAtK):
    """R-precision: the fraction of relevant neighbours among the `R` nearest.

    `R = r[label]`, the number of indexed examples of the query's class (one
    fewer with `drop_closest_lookup`), so a perfect embedding scores 1 for
    every query whatever its class size. As pytorch-metric-learning's
    `AccuracyCalculator` reports it (Musgrave et al., "A Metric Learning
    Reality Check", ECCV 2020); it is `PrecisionAtK(r, clip_at_r=True)`
    with `k` the largest `R`.

    Args:
        r: Class id -> number of indexed examples of that class.
        k: Neighbours looked up per query; defaults to the largest `R`.
        name: Defaults to `"r_precision"`.
        **kwargs: See `RetrievalMetric`.

    Example:

    >>> from tensorflow_similarity.retrieval_metrics import RPrecision
    >>> RPrecision(r={1: 2, 2: 3}).compute(
    ...     query_labels=[1, 2], lookup_labels=[[1, 2, 1], [2, 1, 2]])
    0.5833333333333333
    """

    default_name = "r_precision"
    default_canonical_name = "r_precision"

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
