"""The interface of index evaluators."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorflow_similarity.types import CalibrationResults, Lookup


class Evaluator(abc.ABC):
    """Computes retrieval and classification metrics of lookups, and calibrates.

    An `Indexer` delegates the arithmetic of `evaluate_retrieval`,
    `evaluate_classification` and `calibrate` to its evaluator, so another
    implementation (one that streams to disk, or runs on an accelerator)
    can replace `MemoryEvaluator` without touching the indexer.
    """

    @abc.abstractmethod
    def evaluate_retrieval(
        self,
        target_labels: Sequence[int],
        lookups: Sequence[Sequence[Lookup]],
        retrieval_metrics: Sequence[Any],
        distance_rounding: int = 8,
    ) -> dict[str, Any]:
        """Returns each retrieval metric of `lookups`, keyed by the metric's name."""

    @abc.abstractmethod
    def evaluate_classification(
        self,
        query_labels: Any,
        lookup_labels: Any,
        lookup_distances: Any,
        distance_thresholds: Any,
        metrics: Sequence[Any],
        matcher: Any,
        distance_rounding: int = 8,
        verbose: int = 1,
    ) -> dict[str, np.ndarray]:
        """Returns `"distance"` and each metric's value at each distance threshold."""

    @abc.abstractmethod
    def calibrate(
        self,
        target_labels: Sequence[int],
        lookups: Sequence[Sequence[Lookup]],
        thresholds_targets: Mapping[str, float],
        calibration_metric: Any,
        matcher: Any,
        extra_metrics: Sequence[Any] = (),
        distance_rounding: int = 8,
        metric_rounding: int = 6,
        verbose: int = 1,
    ) -> CalibrationResults:
        """Returns the cutpoints meeting `thresholds_targets` and the optimal one."""
