"""0.17 path: re-exports `DistanceGapMetric`, `DistanceMetric` and 9 more.

The distance metrics and their nine shortcuts (`avg_neg`, ..., `sum_pos`), defined in
`tensorflow_similarity.training_metrics.distance_gap_metric`, `.distance_metric` and
`.shortcuts`.
"""

from tensorflow_similarity.training_metrics.distance_gap_metric import DistanceGapMetric
from tensorflow_similarity.training_metrics.distance_metric import DistanceMetric
from tensorflow_similarity.training_metrics.shortcuts import (
    avg_neg,
    avg_pos,
    dist_gap,
    max_neg,
    max_pos,
    min_neg,
    min_pos,
    sum_neg,
    sum_pos,
)

__all__ = [
    "DistanceGapMetric",
    "DistanceMetric",
    "avg_neg",
    "avg_pos",
    "dist_gap",
    "max_neg",
    "max_pos",
    "min_neg",
    "min_pos",
    "sum_neg",
    "sum_pos",
]
