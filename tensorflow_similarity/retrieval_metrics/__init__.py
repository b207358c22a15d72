"""Retrieval metrics: scores of the nearest neighbours of labelled queries.

0.17's `RecallAtK`, `PrecisionAtK`, `MapAtK`, `BNDCG`, plus `RPrecision` and
`MapAtR` as pytorch-metric-learning reports them. Each has
`compute(query_labels=..., lookup_labels=..., lookup_distances=...,
match_mask=...) -> float`, micro or macro averaged.
"""

from __future__ import annotations

from tensorflow_similarity.retrieval_metrics.bndcg import BNDCG
from tensorflow_similarity.retrieval_metrics.map_at_k import MapAtK
from tensorflow_similarity.retrieval_metrics.map_at_r import MapAtR
from tensorflow_similarity.retrieval_metrics.precision_at_k import PrecisionAtK
from tensorflow_similarity.retrieval_metrics.r_precision import RPrecision
from tensorflow_similarity.retrieval_metrics.recall_at_k import RecallAtK
from tensorflow_similarity.retrieval_metrics.retrieval_metric import (
    RetrievalMetric,
    compute_match_mask,
)

__all__ = [
    "BNDCG",
    "MapAtK",
    "MapAtR",
    "PrecisionAtK",
    "RPrecision",
    "RecallAtK",
    "RetrievalMetric",
    "compute_match_mask",
]
