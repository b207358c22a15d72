"""What the `Indexer`'s measuring verbs do with their neighbours beyond the `Evaluator`.

The measuring verbs need only each query's neighbour labels and distances,
as `[n, k]` matrices. With the default `MemoryEvaluator` they compute on
those matrices directly (`evaluate_retrieval_on_matrices`,
`calibrate_on_matrices`), the same steps as `MemoryEvaluator` takes after
unpacking its `Lookup`s, so the values are the same bit for bit; building a
`Lookup` per neighbour (a million for 10,000 queries of 100 neighbours) is
left to `batch_lookup` and to evaluators that override those verbs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorflow_similarity.classification_metrics import ClassificationMetric
from tensorflow_similarity.evaluators import Evaluator, MemoryEvaluator
from tensorflow_similarity.evaluators.memory_evaluator import (
    calibration_from_matrices,
    retrieval_from_matrices,
)
from tensorflow_similarity.indexer.text_table import format_table
from tensorflow_similarity.matchers import ClassificationMatch
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.types import MISSING_DISTANCE, MISSING_LABEL, CalibrationResults

# MemoryEvaluator's default, which the Indexer has always used.
DISTANCE_ROUNDING = 8

NO_LABEL_MESSAGE = (
    "A neighbour has no label: the index holds examples indexed without "
    "labels. Index them with their labels (index(x, y)) to evaluate, "
    "calibrate or match."
)


def check_retrieval_metrics(retrieval_metrics: Sequence[Any]) -> list[RetrievalMetric]:
    """`retrieval_metrics` as a non-empty list of `RetrievalMetric`s.

    Raises:
        ValueError: For an item that is not a `RetrievalMetric`, or no item.
    """
    metrics = list(retrieval_metrics)
    for metric in metrics:
        if not isinstance(metric, RetrievalMetric):
            raise ValueError(
                f"{metric!r} is not a RetrievalMetric. Pass instances such as "
                "RecallAtK(k=1) or PrecisionAtK(k=5)."
            )
    if not metrics:
        raise ValueError("retrieval_metrics is empty: pass at least one RetrievalMetric.")
    return metrics


def cutpoints_table(results: CalibrationResults) -> str:
    """The calibration's cutpoints as a text table: name, value, distance, then other metrics."""
    rows = list(results.cutpoints.values())
    headers = ["name", "value", "distance"]
    headers += [key for key in rows[0] if key not in headers]
    return format_table([[row[h] for h in headers] for row in rows], headers)


def match_at_cutpoints(
    labels: Any,
    distances: Any,
    cutpoints: Mapping[str, Mapping[str, Any]],
    no_match_label: int,
) -> dict[str, list[int]]:
    """Per cutpoint, each query's matched label, or `no_match_label` beyond its distance."""
    labels = np.asarray(labels).reshape(-1)
    distances = np.asarray(distances).reshape(-1)
    matches = {}
    for name, cutpoint in cutpoints.items():
        threshold = float(cutpoint["distance"])
        matches[name] = [
            int(label) if distance <= threshold else no_match_label
            for label, distance in zip(labels, distances, strict=True)
        ]
    return matches


def evaluates_on_matrices(evaluator: Evaluator, verb: str) -> bool:
    """Whether `evaluator.<verb>` is `MemoryEvaluator`'s, so the matrices give its values.

    A subclass overriding the verb may read more of each `Lookup` than its
    label and distance; it is given the `Lookup`s.
    """
    return isinstance(evaluator, MemoryEvaluator) and getattr(type(evaluator), verb) is getattr(
        MemoryEvaluator, verb
    )


def neighbour_matrices(
    idxs: np.ndarray,
    distances: np.ndarray,
    labels_of_ids: Sequence[int | None],
    positions: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The `[n, K]` labels and float64 distances of the found neighbours, nearest first.

    What `unpack_lookup_labels` and `unpack_lookup_distances` make of
    `batch_lookup`'s `Lookup`s: a neighbour the search did not find (id -1)
    is left out and its row padded at the end with `MISSING_LABEL` and
    `MISSING_DISTANCE`; `K` is the longest row.

    Args:
        idxs: `[n, k]` record ids from the search, -1 for not found.
        distances: `[n, k]` their distances.
        labels_of_ids: The label of each distinct found record.
        positions: For each found id, in row-major order, its position in
            `labels_of_ids`.

    Raises:
        ValueError: If a found neighbour has no label.
    """
    if any(label is None for label in labels_of_ids):
        raise ValueError(NO_LABEL_MESSAGE)
    label_values = np.asarray(labels_of_ids, dtype=np.int64).reshape(-1)
    found = idxs >= 0
    counts = found.sum(axis=1)
    width = int(counts.max(initial=0))
    if found.all():
        labels = label_values[positions].reshape(idxs.shape)
        return labels[:, :width], distances[:, :width].astype(np.float64)
    # Row-major boolean assignment keeps each row's found neighbours in order, left-justified.
    kept = np.arange(idxs.shape[1])[np.newaxis, :] < counts[:, np.newaxis]
    labels = np.full(idxs.shape, MISSING_LABEL, dtype=np.int64)
    labels[kept] = label_values[positions]
    padded = np.full(idxs.shape, MISSING_DISTANCE, dtype=np.float64)
    padded[kept] = distances[found]
    return labels[:, :width], padded[:, :width]


def rounded_distances(distances: np.ndarray, rounding: int | None = None) -> np.ndarray:
    """float32 distances, rounded in float64 first, as `unpack_lookup_distances` returns them."""
    if rounding is not None:
        distances = np.round(distances, rounding)
    return distances.astype(np.float32)


def evaluate_retrieval_on_matrices(
    target_labels: Any,
    lookup_labels: np.ndarray,
    lookup_distances: np.ndarray,
    retrieval_metrics: Sequence[RetrievalMetric],
) -> dict[str, Any]:
    """`MemoryEvaluator.evaluate_retrieval` on the neighbour matrices instead of `Lookup`s.

    Args:
        target_labels: The `n` queries' labels.
        lookup_labels: `[n, K]` labels from `neighbour_matrices`.
        lookup_distances: `[n, K]` float64 distances from `neighbour_matrices`.
        retrieval_metrics: `RetrievalMetric` instances.

    Returns:
        Metric name to its value: a float, or an array for a metric returning one.

    Raises:
        ValueError: If a metric needs more neighbours than each query has.
    """
    query_labels = np.asarray(target_labels).reshape(-1).astype(np.int64)
    distances = rounded_distances(lookup_distances, DISTANCE_ROUNDING)
    return retrieval_from_matrices(query_labels, lookup_labels, distances, retrieval_metrics)


def calibrate_on_matrices(
    evaluator: MemoryEvaluator,
    target_labels: Any,
    lookup_labels: np.ndarray,
    lookup_distances: np.ndarray,
    thresholds_targets: Mapping[str, float],
    calibration_metric: ClassificationMetric,
    matcher: ClassificationMatch,
    extra_metrics: Sequence[ClassificationMetric],
    metric_rounding: int,
    verbose: int,
) -> CalibrationResults:
    """`MemoryEvaluator.calibrate` on the neighbour matrices instead of `Lookup`s.

    Args:
        evaluator: The evaluator whose `evaluate_classification` is used.
        target_labels: The `n` queries' labels.
        lookup_labels: `[n, K]` labels from `neighbour_matrices`.
        lookup_distances: `[n, K]` float64 distances from `neighbour_matrices`.
        thresholds_targets: Cutpoint name to the calibration metric's target.
        calibration_metric: The metric calibrated.
        matcher: How `K` neighbours make one match.
        extra_metrics: Other metrics reported at each threshold.
        metric_rounding: Decimals the metric values are rounded to.
        verbose: Passed to `evaluate_classification`.

    Returns:
        `CalibrationResults`, as `MemoryEvaluator.calibrate` returns them.

    Raises:
        ValueError: If there are no queries.
    """
    if len(lookup_labels) == 0:
        raise ValueError("calibrate needs lookups of at least one query; none were given.")
    query_labels = np.asarray(target_labels).reshape(-1).astype(np.int64)
    distances = rounded_distances(lookup_distances, DISTANCE_ROUNDING)
    return calibration_from_matrices(
        evaluator,
        query_labels,
        lookup_labels,
        distances,
        thresholds_targets,
        calibration_metric,
        matcher,
        extra_metrics,
        distance_rounding=DISTANCE_ROUNDING,
        metric_rounding=metric_rounding,
        verbose=verbose,
    )
