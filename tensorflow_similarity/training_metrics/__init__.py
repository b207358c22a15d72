"""Metrics of labelled embeddings during training, computed over the global batch."""

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
from tensorflow_similarity.training_metrics.utils import batch_class_ratio

__all__ = [
    "DistanceGapMetric",
    "DistanceMetric",
    "avg_neg",
    "avg_pos",
    "batch_class_ratio",
    "dist_gap",
    "max_neg",
    "max_pos",
    "min_neg",
    "min_pos",
    "sum_neg",
    "sum_pos",
]
