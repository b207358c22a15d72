"""Evaluation and calibration of lookups held in memory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorflow_similarity.classification_metrics import ClassificationMetric
from tensorflow_similarity.evaluators.evaluator import Evaluator
from tensorflow_similarity.matchers import ClassificationMatch, make_classification_matcher
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.types import (
    CalibrationResults,
    Lookup,
    unpack_lookup_distances,
    unpack_lookup_labels,
)


class MemoryEvaluator(Evaluator):
    """Evaluates and calibrates lookups held in memory, as 0.17's `MemoryEvaluator`.

    Calibration tries every distinct (rounded) lookup distance as a threshold,
    computes the calibration metric and the extra metrics at each, and picks
    the `"optimal"` cutpoint: the largest distance at which the calibration
    metric is best (its last arg-max, or arg-min for a metric to minimise).
    A target cutpoint `name: value` is the first threshold at which the metric
    reaches `value` for an increasing metric, the last for a decreasing one;
    a target never reached has no cutpoint.

    Example:

    Four queries of classes 0, 1, 0, 1 whose nearest neighbours are of classes
    0, 1, 1, 1 at distances 0.125, 0.25, 0.375, 0.5:

    >>> from tensorflow_similarity.classification_metrics import F1Score
    >>> from tensorflow_similarity.evaluators import MemoryEvaluator
    >>> from tensorflow_similarity.types import Lookup
    >>> labels = [0, 1, 0, 1]
    >>> lookups = [[Lookup(rank=1, distance=d, label=c)]
    ...            for d, c in [(0.125, 0), (0.25, 1), (0.375, 1), (0.5, 1)]]
    >>> results = MemoryEvaluator().calibrate(
    ...     labels, lookups, {"0.8": 0.8}, F1Score(), "match_nearest")
    >>> results.thresholds["f1"]
    array([0.5     , 0.8     , 0.666667, 0.857143])
    >>> results.cutpoints["0.8"]["distance"], results.cutpoints["optimal"]["distance"]
    (0.25, 0.5)
    """

    def evaluate_retrieval(
        self,
        target_labels: Sequence[int],
        lookups: Sequence[Sequence[Lookup]],
        retrieval_metrics: Sequence[RetrievalMetric],
        distance_rounding: int = 8,
    ) -> dict[str, Any]:
        """Computes retrieval metrics of `lookups` against the queries' labels.

        Args:
            target_labels: The label of each query.
            lookups: Per query, its neighbours by rank (`Indexer.batch_lookup`).
            retrieval_metrics: `RetrievalMetric` instances.
            distance_rounding: Decimals the distances are rounded to.

        Returns:
            Metric name (such as `"recall@1"`) to its value: a float, or an
            array for a metric returning one.

        Raises:
            ValueError: If a metric needs more neighbours than each query has,
                or the number of labels is not the number of queries.
        """
        query_labels = _labels(target_labels, len(lookups))
        lookup_labels = unpack_lookup_labels(lookups)
        distances = unpack_lookup_distances(lookups, rounding=distance_rounding)
        return retrieval_from_matrices(query_labels, lookup_labels, distances, retrieval_metrics)

    def evaluate_classification(
        self,
        query_labels: Any,
        lookup_labels: Any,
        lookup_distances: Any,
        distance_thresholds: Any,
        metrics: Sequence[ClassificationMetric],
        matcher: str | ClassificationMatch,
        distance_rounding: int = 8,
        verbose: int = 1,
    ) -> dict[str, np.ndarray]:
        """Computes classification metrics at each distance threshold.

        Args:
            query_labels: `[num_queries]` labels.
            lookup_labels: `[num_queries, k]` neighbour labels.
            lookup_distances: `[num_queries, k]` neighbour distances.
            distance_thresholds: `[num_thresholds]` distances; a match farther
                than a threshold counts as no match there.
            metrics: `ClassificationMetric` instances.
            matcher: `"match_nearest"`, `"match_majority_vote"` or a
                `ClassificationMatch`: how `k` neighbours make one match.
            distance_rounding: Decimals the distances are rounded to.
            verbose: Unused; kept for 0.17's signature.

        Returns:
            `"distance"`: the sorted thresholds, and each metric's name to
            its values there.
        """
        del verbose
        # Thresholds and distances both float32, so that a threshold taken from the
        # distances admits exactly the distances up to it.
        thresholds = np.sort(np.asarray(distance_thresholds, np.float32).reshape(-1))
        matcher = make_classification_matcher(matcher)
        matcher.compile(distance_thresholds=thresholds)
        matcher.compute_count(
            query_labels=np.asarray(query_labels),
            lookup_labels=np.asarray(lookup_labels),
            lookup_distances=matcher_distances(lookup_distances, distance_rounding),
        )
        return metrics_at_thresholds(matcher, thresholds, metrics)

    def calibrate(
        self,
        target_labels: Sequence[int],
        lookups: Sequence[Sequence[Lookup]],
        thresholds_targets: Mapping[str, float],
        calibration_metric: ClassificationMetric,
        matcher: str | ClassificationMatch,
        extra_metrics: Sequence[ClassificationMetric] = (),
        distance_rounding: int = 8,
        metric_rounding: int = 6,
        verbose: int = 1,
    ) -> CalibrationResults:
        """Finds the distance thresholds meeting `thresholds_targets`, and the optimal one.

        Args:
            target_labels: The label of each query.
            lookups: Per query, its neighbours by rank (`Indexer.batch_lookup`).
            thresholds_targets: Cutpoint name to the calibration metric's
                target value, e.g. `{"0.9": 0.9}`.
            calibration_metric: The `ClassificationMetric` calibrated.
            matcher: How `k` neighbours make one match (see
                `evaluate_classification`).
            extra_metrics: Other metrics reported at each threshold.
            distance_rounding: Decimals the distances are rounded to.
            metric_rounding: Decimals the metric values are rounded to.
            verbose: Unused; kept for 0.17's signature.

        Returns:
            `CalibrationResults`; `thresholds["value"]` is the calibration
            metric.

        Raises:
            ValueError: If `lookups` is empty or the number of labels is not
                the number of queries.
        """
        if len(lookups) == 0:
            raise ValueError("calibrate needs lookups of at least one query; none were given.")
        query_labels = _labels(target_labels, len(lookups))
        lookup_labels = unpack_lookup_labels(lookups)
        distances = unpack_lookup_distances(lookups, rounding=distance_rounding)
        return calibration_from_matrices(
            self,
            query_labels,
            lookup_labels,
            distances,
            thresholds_targets,
            calibration_metric,
            matcher,
            extra_metrics,
            distance_rounding=distance_rounding,
            metric_rounding=metric_rounding,
            verbose=verbose,
        )


def retrieval_from_matrices(
    query_labels: np.ndarray,
    lookup_labels: np.ndarray,
    distances: np.ndarray,
    retrieval_metrics: Sequence[RetrievalMetric],
) -> dict[str, Any]:
    """The metrics of `MemoryEvaluator.evaluate_retrieval`, on neighbour matrices.

    Args:
        query_labels: `[n]` int64 labels of the queries.
        lookup_labels: `[n, K]` labels of their neighbours by rank.
        distances: `[n, K]` neighbour distances, already rounded.
        retrieval_metrics: `RetrievalMetric` instances.

    Returns:
        Metric name to its value: a float, or an array for a metric returning one.

    Raises:
        ValueError: If a metric needs more neighbours than each query has.
    """
    check_lookup_width(lookup_labels.shape[1], retrieval_metrics)
    match_mask = lookup_labels == query_labels[:, None]
    results: dict[str, Any] = {}
    for metric in retrieval_metrics:
        value = metric.compute(
            query_labels=query_labels,
            lookup_labels=lookup_labels,
            lookup_distances=distances,
            match_mask=match_mask,
        )
        value = np.asarray(value)
        results[metric.name] = float(value) if value.size == 1 else value
    return results


def check_lookup_width(width: int, retrieval_metrics: Sequence[RetrievalMetric]) -> None:
    """Raises unless every metric's `k` is at most `width`, the neighbours per query.

    Raises:
        ValueError: Naming the first metric needing more neighbours.
    """
    for metric in retrieval_metrics:
        if width < metric.k:
            raise ValueError(
                f"Metric {metric.name!r} needs {metric.k} neighbours per query but the "
                f"lookups have {width}. Look up at least k={metric.k} "
                "neighbours (and index at least that many examples)."
            )


def calibration_from_matrices(
    evaluator: Any,
    query_labels: np.ndarray,
    lookup_labels: np.ndarray,
    distances: np.ndarray,
    thresholds_targets: Mapping[str, float],
    calibration_metric: ClassificationMetric,
    matcher: str | ClassificationMatch,
    extra_metrics: Sequence[ClassificationMetric] = (),
    *,
    distance_rounding: int = 8,
    metric_rounding: int = 6,
    verbose: int = 1,
) -> CalibrationResults:
    """The calibration of `MemoryEvaluator.calibrate`, on neighbour matrices.

    Evaluates every distinct finite distance as a threshold with
    `evaluator.evaluate_classification`, rounds the metrics, and picks the
    optimal cutpoint (the largest distance with the best value) and, for each
    target, the first threshold reaching it.

    Args:
        evaluator: The evaluator whose `evaluate_classification` is used.
        query_labels: `[n]` int64 labels of the queries.
        lookup_labels: `[n, K]` labels of their neighbours by rank.
        distances: `[n, K]` neighbour distances, already rounded.
        thresholds_targets: Cutpoint name to the calibration metric's target.
        calibration_metric: The metric calibrated.
        matcher: How `K` neighbours make one match.
        extra_metrics: Other metrics reported at each threshold.
        distance_rounding: Decimals the distances were rounded to.
        metric_rounding: Decimals the metric values are rounded to.
        verbose: Passed to `evaluate_classification`.

    Returns:
        `CalibrationResults`; `thresholds["value"]` is the calibration metric.
    """
    thresholds = np.unique(distances[np.isfinite(distances)])
    metrics = [*extra_metrics, calibration_metric]
    results = evaluator.evaluate_classification(
        query_labels,
        lookup_labels,
        distances,
        thresholds,
        metrics,
        matcher,
        distance_rounding=distance_rounding,
        verbose=verbose,
    )
    return calibration_from_results(
        results, thresholds_targets, calibration_metric, metrics, metric_rounding
    )


def matcher_distances(distances: Any, rounding: int | None) -> np.ndarray:
    """The float32 distances a matcher is given: rounded in float64 first, when `rounding`."""
    distances = np.asarray(distances, np.float64)
    if rounding is not None:
        distances = np.round(distances, rounding)
    return distances.astype(np.float32)


def metrics_at_thresholds(
    matcher: ClassificationMatch, thresholds: np.ndarray, metrics: Sequence[ClassificationMetric]
) -> dict[str, np.ndarray]:
    """`"distance"`: the thresholds, and each metric's values from the matcher's counts there.

    Args:
        matcher: A matcher compiled with `thresholds` whose counts are made.
        thresholds: The sorted float32 thresholds.
        metrics: `ClassificationMetric` instances.
    """
    results = {"distance": thresholds}
    for metric in metrics:
        value = metric.compute(
            tp=matcher.tp, fp=matcher.fp, tn=matcher.tn, fn=matcher.fn, count=matcher.count
        )
        results[metric.name] = np.asarray(value)
    return results


def calibration_from_results(
    results: dict[str, np.ndarray],
    thresholds_targets: Mapping[str, float],
    calibration_metric: ClassificationMetric,
    metrics: Sequence[ClassificationMetric],
    metric_rounding: int,
) -> CalibrationResults:
    """The cutpoints of `MemoryEvaluator.calibrate`, from the metrics at every threshold.

    Rounds the metrics, and picks the optimal cutpoint (the largest distance
    with the best value) and, for each target, the first threshold reaching it.

    Args:
        results: `evaluate_classification`'s results at every threshold.
        thresholds_targets: Cutpoint name to the calibration metric's target.
        calibration_metric: The metric calibrated.
        metrics: The metrics in `results` (the calibration metric last).
        metric_rounding: Decimals the metric values are rounded to.

    Returns:
        `CalibrationResults`; `thresholds["value"]` is the calibration metric.
    """
    for metric in metrics:
        results[metric.name] = np.round(results[metric.name], metric_rounding)
    values = results[calibration_metric.name]
    best = _best(values, calibration_metric)
    cutpoints = {"optimal": _cutpoint("optimal", results, best, calibration_metric.name)}
    for name, target in thresholds_targets.items():
        reached = np.flatnonzero(values >= target)
        if reached.size:
            index = reached[0] if calibration_metric.increasing else reached[-1]
            cutpoints[name] = _cutpoint(name, results, int(index), calibration_metric.name)
    results["value"] = values
    return CalibrationResults(cutpoints=cutpoints, thresholds=results)


def _labels(target_labels: Sequence[int], num_queries: int) -> np.ndarray:
    labels = np.asarray(target_labels).reshape(-1)
    if len(labels) != num_queries:
        raise ValueError(
            f"Got {len(labels)} labels for {num_queries} queries. Pass one label per query."
        )
    return labels.astype(np.int64)


def _best(values: np.ndarray, metric: ClassificationMetric) -> int:
    # The last best index: the largest distance achieving the best value.
    reverse = values[::-1]
    position = np.argmax(reverse) if metric.maximize else np.argmin(reverse)
    return int(len(values) - 1 - position)


def _cutpoint(
    name: str, results: Mapping[str, np.ndarray], index: int, calibrated: str
) -> dict[str, Any]:
    cutpoint: dict[str, Any] = {"name": name, "value": float(results[calibrated][index])}
    for metric_name, values in results.items():
        cutpoint[metric_name] = float(values[index])
    return cutpoint
