"""What the `Indexer`'s measuring verbs do with their neighbours beyond the `Evaluator`.

The measuring verbs need only each query's neighbour labels and distances,
as `[n, k]` matrices. With the default `MemoryEvaluator` they compute on
those matrices directly, the same steps as `MemoryEvaluator` takes after
unpacking its `Lookup`s, so the values are the same; building a `Lookup`
per neighbour (a million for 10,000 queries of 100 neighbours) is left to
`batch_lookup` and to evaluators that override those verbs.

They also take the queries a chunk at a time (`neighbour_chunks`) and keep
only what each measure needs across chunks, so that a million queries are
measured in the memory of one chunk: per retrieval metric a sum of scores
(per class, for a macro average); per classification threshold four counts;
and for calibration, whose thresholds are the distances themselves, one
flag and one distance per query and the distinct distances, the rows of the
table it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tensorflow_similarity.classification_metrics import ClassificationMetric
from tensorflow_similarity.evaluators import Evaluator, MemoryEvaluator
from tensorflow_similarity.evaluators.memory_evaluator import (
    calibration_from_matrices,
    calibration_from_results,
    check_lookup_width,
    matcher_distances,
    metrics_at_thresholds,
    retrieval_from_matrices,
)
from tensorflow_similarity.indexer.text_table import format_table
from tensorflow_similarity.matchers import ClassificationMatch
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.types import MISSING_DISTANCE, MISSING_LABEL, CalibrationResults

# MemoryEvaluator's default, which the Indexer has always used.
DISTANCE_ROUNDING = 8

# Queries searched and measured at a time: 8192 queries of 100 neighbours
# are a few tens of megabytes of neighbour matrices.
DEFAULT_CHUNK_SIZE = 8192

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


class NeighbourChunk(NamedTuple):
    """The neighbours of one chunk of queries, as `neighbour_matrices` gives them.

    Attributes:
        queries: The chunk's queries, a slice of all of them.
        labels: `[c, K]` int64 neighbour labels, `K` the neighbours asked
            for (at most the index size); a row of fewer found neighbours is
            padded with `MISSING_LABEL`.
        distances: `[c, K]` float64 distances, padded with `MISSING_DISTANCE`.
        found_width: The longest row of found neighbours in the chunk.
    """

    queries: slice
    labels: np.ndarray
    distances: np.ndarray
    found_width: int


def neighbour_chunks(
    neighbours: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
    embeddings: np.ndarray,
    k: int,
    index_size: int,
    chunk_size: int,
) -> Iterator[NeighbourChunk]:
    """Yields the neighbours of `chunk_size` queries at a time, every chunk `K` wide.

    The chunks are padded to one width, `K = min(k, index_size)`, so that a
    chunk in which an approximate search found fewer neighbours measures as
    the same rows would among all the queries; the longest found row over
    all chunks (the width the whole set would have) is the largest
    `found_width`. No queries make one empty chunk, so the search still
    refuses an empty index.

    Args:
        neighbours: `Indexer._neighbour_matrices`: `[c, dim]` queries and `k`
            to their `[c, K']` labels and float64 distances.
        embeddings: The `[n, dim]` queries.
        k: The neighbours asked for; the first chunk is searched with it
            (so that a `k` above the index size warns once), the others with
            `K`.
        index_size: The number of indexed embeddings.
        chunk_size: Queries per chunk.
    """
    num = len(embeddings)
    width = None
    for start in range(0, max(num, 1), chunk_size):
        stop = min(start + chunk_size, num)
        labels, distances = neighbours(embeddings[start:stop], k if width is None else width)
        # Known to be an int once the first search accepted it.
        width = min(k, index_size)
        found = labels.shape[1]
        if found < width:
            pad = ((0, 0), (0, width - found))
            labels = np.pad(labels, pad, constant_values=MISSING_LABEL)
            distances = np.pad(distances, pad, constant_values=MISSING_DISTANCE)
        yield NeighbourChunk(slice(start, stop), labels, distances, found)


def streams_scores(metric: RetrievalMetric) -> bool:
    """Whether `metric` is `RetrievalMetric.compute`'s average of per-query scores.

    A metric overriding `compute` (0.17's way of writing one) may not be a
    mean over the queries; it is given all of them at once.
    """
    return type(metric).compute is RetrievalMetric.compute


def check_neighbour_width(width: int, retrieval_metrics: Sequence[RetrievalMetric]) -> None:
    """Raises as `retrieval_from_matrices` and `RetrievalMetric.compute` do on `width` columns.

    Raises:
        ValueError: If a metric needs more neighbours than `width`.
    """
    check_lookup_width(width, retrieval_metrics)
    for metric in retrieval_metrics:
        if streams_scores(metric) and width < metric.lookups_needed:
            # compute's own message, from the check it makes first.
            metric.score_queries(
                query_labels=np.zeros(0, np.int64), match_mask=np.zeros((0, width), bool)
            )


class QueryAverage:
    """The running `"micro"` or `"macro"` average of per-query scores, as `compute` takes it.

    Args:
        average: `"micro"` (the mean over the queries) or `"macro"` (the
            mean over the query classes of each class's mean).
    """

    def __init__(self, average: str) -> None:
        self.average = average
        self._sums: dict[int, float] = {}
        self._counts: dict[int, int] = {}

    def add(self, scores: np.ndarray, query_labels: np.ndarray) -> None:
        """Adds the `[c]` scores of a chunk of queries of labels `query_labels`."""
        if self.average == "micro":
            self._add(0, float(np.sum(scores)), len(scores))
            return
        # Each class's scores in query order, summed by np.sum as compute's np.mean
        # sums them, so that one chunk gives its value bit for bit.
        order = np.argsort(query_labels, kind="stable")
        labels, scores = query_labels[order], scores[order]
        bounds = [0, *(np.flatnonzero(labels[1:] != labels[:-1]) + 1).tolist(), len(labels)]
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            if stop > start:
                self._add(int(labels[start]), float(np.sum(scores[start:stop])), stop - start)

    def _add(self, label: int, total: float, count: int) -> None:
        self._sums[label] = self._sums.get(label, 0.0) + total
        self._counts[label] = self._counts.get(label, 0) + count

    def result(self) -> float:
        """The average; 0.0 when no query was added."""
        means = [
            self._sums[label] / self._counts[label]
            for label in sorted(self._sums)
            if self._counts[label]
        ]
        return float(np.mean(means)) if means else 0.0


def evaluate_retrieval_in_chunks(
    chunks: Iterable[NeighbourChunk],
    target_labels: Any,
    retrieval_metrics: Sequence[RetrievalMetric],
) -> dict[str, Any]:
    """`MemoryEvaluator.evaluate_retrieval` of all the queries, measured chunk by chunk.

    A metric scoring each query (`streams_scores`) keeps a running average;
    one overriding `compute` is given all the queries' matrices at the end,
    so its memory grows with the query count, as before.

    Args:
        chunks: `neighbour_chunks` of the queries.
        target_labels: The `n` queries' labels.
        retrieval_metrics: `RetrievalMetric` instances.

    Returns:
        Metric name to its value: a float, or an array for a metric returning one.

    Raises:
        ValueError: If a metric needs more neighbours than each query has.
    """
    target_labels = np.asarray(target_labels).reshape(-1)
    averages = {
        id(metric): QueryAverage(metric.average)
        for metric in retrieval_metrics
        if streams_scores(metric)
    }
    whole = [metric for metric in retrieval_metrics if not streams_scores(metric)]
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    width = 0
    for chunk in chunks:
        # The padded width bounds the found one: a metric needing more fails whatever is found.
        check_neighbour_width(chunk.labels.shape[1], retrieval_metrics)
        width = max(width, chunk.found_width)
        query_labels = target_labels[chunk.queries].astype(np.int64)
        distances = rounded_distances(chunk.distances, DISTANCE_ROUNDING)
        match_mask = chunk.labels == query_labels[:, np.newaxis]
        for metric in retrieval_metrics:
            if id(metric) in averages:
                scores = metric.score_queries(
                    query_labels=query_labels,
                    lookup_labels=chunk.labels,
                    lookup_distances=distances,
                    match_mask=match_mask,
                )
                averages[id(metric)].add(scores, query_labels)
        if whole:
            kept.append((query_labels, chunk.labels, distances))
    check_neighbour_width(width, retrieval_metrics)
    results = {}
    if whole:
        query_labels, labels, distances = (
            np.concatenate(parts) for parts in zip(*kept, strict=True)
        )
        results = retrieval_from_matrices(
            query_labels, labels[:, :width], distances[:, :width], whole
        )
    return {
        metric.name: averages[id(metric)].result()
        if id(metric) in averages
        else results[metric.name]
        for metric in retrieval_metrics
    }


def check_some_queries(num_queries: int, verb: str) -> None:
    """Raises before any search when there is no query to measure.

    Raises:
        ValueError: If `num_queries` is 0.
    """
    if num_queries == 0:
        raise ValueError(f"{verb} needs lookups of at least one query; none were given.")


def evaluate_classification_in_chunks(
    chunks: Iterable[NeighbourChunk],
    target_labels: Any,
    distance_thresholds: Any,
    metrics: Sequence[ClassificationMetric],
    matcher: ClassificationMatch,
) -> dict[str, np.ndarray]:
    """`MemoryEvaluator.evaluate_classification` of all the queries, counted chunk by chunk.

    The thresholds are compiled into `matcher` before the first chunk, so
    bad ones are refused before any search; each chunk's matches are then
    added to the counts at every threshold (`ClassificationMatch.update_count`).

    Args:
        chunks: `neighbour_chunks` of the queries.
        target_labels: The `n` queries' labels.
        distance_thresholds: The thresholds.
        metrics: `ClassificationMetric` instances.
        matcher: How `K` neighbours make one match.

    Returns:
        `"distance"`: the sorted float32 thresholds, and each metric's name
        to its values there.

    Raises:
        ValueError: If a threshold is NaN or there is none.
    """
    target_labels = np.asarray(target_labels).reshape(-1)
    thresholds = np.sort(np.asarray(distance_thresholds, np.float32).reshape(-1))
    matcher.compile(distance_thresholds=thresholds)
    matcher.reset_count()
    for chunk in chunks:
        # The float32 distances the Indexer hands its evaluator, which rounds them again.
        distances = matcher_distances(rounded_distances(chunk.distances), DISTANCE_ROUNDING)
        matcher.update_count(
            *matcher.derive_outcomes(target_labels[chunk.queries], chunk.labels, distances)
        )
    return metrics_at_thresholds(matcher, thresholds, metrics)


def calibrate_in_chunks(
    chunks: Iterable[NeighbourChunk],
    num_queries: int,
    target_labels: Any,
    thresholds_targets: Mapping[str, float],
    calibration_metric: ClassificationMetric,
    matcher: ClassificationMatch,
    extra_metrics: Sequence[ClassificationMetric],
    metric_rounding: int,
) -> CalibrationResults:
    """`calibrate_on_matrices` of all the queries, their neighbours taken chunk by chunk.

    The thresholds are every distinct distance of every query, known only
    after the last chunk; so each query's match is kept as one flag (its
    derived label is its own) and one distance, with each chunk's distinct
    distances, and counted at every threshold at the end. What grows with
    the queries is that and the table of metrics per threshold returned.

    Args:
        chunks: `neighbour_chunks` of the queries.
        num_queries: `n`, the number of queries.
        target_labels: The `n` queries' labels.
        thresholds_targets: Cutpoint name to the calibration metric's target.
        calibration_metric: The metric calibrated.
        matcher: How `K` neighbours make one match.
        extra_metrics: Other metrics reported at each threshold.
        metric_rounding: Decimals the metric values are rounded to.

    Returns:
        `CalibrationResults`, as `MemoryEvaluator.calibrate` returns them.
    """
    target_labels = np.asarray(target_labels).reshape(-1)
    right = np.zeros(num_queries, bool)
    derived: np.ndarray | None = None
    distinct = []
    for chunk in chunks:
        distances = rounded_distances(chunk.distances, DISTANCE_ROUNDING)
        distinct.append(np.unique(distances[np.isfinite(distances)]))
        outcomes = matcher.derive_outcomes(
            target_labels[chunk.queries].astype(np.int64),
            chunk.labels,
            matcher_distances(distances, DISTANCE_ROUNDING),
        )
        if derived is None:
            # The matcher's own distance type: float32 for the built-in ones.
            derived = np.zeros(num_queries, outcomes[1].dtype)
        right[chunk.queries], derived[chunk.queries] = outcomes
    thresholds = np.unique(np.concatenate(distinct))
    matcher.compile(distance_thresholds=thresholds)
    matcher.reset_count()
    matcher.update_count(right, derived)
    metrics = [*extra_metrics, calibration_metric]
    return calibration_from_results(
        metrics_at_thresholds(matcher, thresholds, metrics),
        thresholds_targets,
        calibration_metric,
        metrics,
        metric_rounding,
    )
