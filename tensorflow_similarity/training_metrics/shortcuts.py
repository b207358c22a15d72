"""0.17's one-call constructors of the common distance metrics (`max_pos`, `min_neg`, ...)."""

from __future__ import annotations

from tensorflow_similarity.distances import Distance
from tensorflow_similarity.training_metrics.distance_gap_metric import DistanceGapMetric
from tensorflow_similarity.training_metrics.distance_metric import DistanceMetric


def dist_gap(distance: str | Distance = "cosine") -> DistanceGapMetric:
    """`|min_neg - max_pos|` of each batch: `DistanceGapMetric(distance)`."""
    return DistanceGapMetric(distance)


def max_pos(distance: str | Distance = "cosine") -> DistanceMetric:
    """The largest positive distance of each batch."""
    return DistanceMetric(distance, aggregate="max")


def max_neg(distance: str | Distance = "cosine") -> DistanceMetric:
    """The largest of the anchors' closest-negative distances."""
    return DistanceMetric(distance, aggregate="max", anchor="negative")


def avg_pos(distance: str | Distance = "cosine") -> DistanceMetric:
    """The mean of the anchors' farthest-positive distances."""
    return DistanceMetric(distance, aggregate="mean")


def avg_neg(distance: str | Distance = "cosine") -> DistanceMetric:
    """The mean of the anchors' closest-negative distances."""
    return DistanceMetric(distance, aggregate="mean", anchor="negative")


def min_pos(distance: str | Distance = "cosine") -> DistanceMetric:
    """The smallest of the anchors' farthest-positive distances."""
    return DistanceMetric(distance, aggregate="min")


def min_neg(distance: str | Distance = "cosine") -> DistanceMetric:
    """The smallest negative distance of each batch."""
    return DistanceMetric(distance, aggregate="min", anchor="negative")


def sum_pos(distance: str | Distance = "cosine") -> DistanceMetric:
    """The sum of the anchors' farthest-positive distances."""
    return DistanceMetric(distance, aggregate="sum")


def sum_neg(distance: str | Distance = "cosine") -> DistanceMetric:
    """The sum of the anchors' closest-negative distances."""
    return DistanceMetric(distance, aggregate="sum", anchor="negative")
