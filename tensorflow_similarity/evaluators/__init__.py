"""Evaluators: the arithmetic behind an index's evaluation and calibration."""

from tensorflow_similarity.evaluators.clustering import (
    check_clustering_labels,
    cluster_embeddings,
    clustering_metrics,
)
from tensorflow_similarity.evaluators.evaluator import Evaluator
from tensorflow_similarity.evaluators.linear_probe import (
    LinearProbeResult,
    linear_probe,
    linear_probe_on_features,
)
from tensorflow_similarity.evaluators.memory_evaluator import MemoryEvaluator

__all__ = [
    "Evaluator",
    "LinearProbeResult",
    "MemoryEvaluator",
    "check_clustering_labels",
    "cluster_embeddings",
    "clustering_metrics",
    "linear_probe",
    "linear_probe_on_features",
]
