"""`IndexMixin`'s verbs that use the neighbours' labels: evaluate retrieval, calibrate, match.

Each is a method of `IndexMixin` (which binds them, see `mixin.py`) and,
like the others, checks its arguments before anything is predicted: a
bad call leaves the index as it was.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.classification_metrics import (
    ClassificationMetric,
    make_classification_metric,
)
from tensorflow_similarity.indexer.indexer import DEFAULT_CHUNK_SIZE
from tensorflow_similarity.indexer.text_table import format_table
from tensorflow_similarity.matchers import ClassificationMatch
from tensorflow_similarity.models.index.arguments import check_length
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.types import CalibrationResults

__all__ = ["calibrate", "evaluate_classification", "evaluate_retrieval", "match"]


def evaluate_retrieval(
    self,
    x: Any,
    y: Any,
    retrieval_metrics: Sequence[RetrievalMetric],
    verbose: int = 1,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> dict[str, Any]:
    """Computes retrieval metrics of the examples' neighbours in the index.

    Args:
        x: Query examples.
        y: Their classes.
        retrieval_metrics: `RetrievalMetric` instances, e.g.
            `[RecallAtK(k=1), PrecisionAtK(k=5)]`.
        verbose: Print the results if 1. Defaults to 1.
        chunk_size: Queries the index searches and scores at a time
            (`Indexer.evaluate_retrieval`), which bounds the memory the
            evaluation takes besides the queries' embeddings. Defaults to
            8192. The values do not depend on it.

    Returns:
        Metric name (e.g. `"recall@1"`) to its value.

    Raises:
        ValueError: If `x` is empty, the index is empty, holds fewer
            examples than a metric's `k`, or `y` does not have one label
            per example, or `chunk_size` is below 1.
    """
    chunk_size = _chunk_size(chunk_size, "evaluate_retrieval")
    x = self._query_batch(x, "evaluate_retrieval")
    check_length("y", y, len(x), required=True)
    self._check_lookup(max([getattr(m, "k", 1) for m in retrieval_metrics] or [1]))
    results = self._index.evaluate_retrieval(
        self._embed(x), y, retrieval_metrics, verbose=verbose, chunk_size=chunk_size
    )
    if verbose:
        print(format_table(list(results.items()), ["metric", "value"]))
    return results


def calibrate(
    self,
    x: Any,
    y: Any,
    thresholds_targets: Mapping[str, float] | None = None,
    k: int = 1,
    calibration_metric: str | ClassificationMetric = "f1",
    matcher: str | ClassificationMatch = "match_nearest",
    extra_metrics: Sequence[str | ClassificationMetric] = ("precision", "recall"),
    rounding: int = 2,
    verbose: int = 1,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> CalibrationResults:
    """Chooses the distance thresholds `match` uses, from labelled examples.

    Args:
        x: Calibration examples (not indexed ones: their nearest
            neighbour would be themselves).
        y: Their classes.
        thresholds_targets: Cutpoint name to a target value of the
            calibration metric, e.g. `{"0.9": 0.9}`. Defaults to none:
            only the `"optimal"` cutpoint.
        k: Neighbours the matcher uses. Defaults to 1.
        calibration_metric: The metric (or its name) calibrated.
            Defaults to `"f1"`.
        matcher: `"match_nearest"`, `"match_majority_vote"` or a
            `ClassificationMatch`. Defaults to `"match_nearest"`.
        extra_metrics: Metrics also reported. Defaults to precision and
            recall.
        rounding: Decimals of the metric values. Defaults to 2.
        verbose: Print the cutpoints if 1. Defaults to 1.
        chunk_size: Queries the index searches and matches at a time
            (`Indexer.calibrate`). Defaults to 8192. The thresholds do
            not depend on it.

    Returns:
        `CalibrationResults(cutpoints, thresholds)`, with an `"optimal"`
        cutpoint.

    Raises:
        ValueError: If `x` is empty, the index is empty, `k` is below 1,
            `y` does not have one label per example or `chunk_size` is
            below 1 (a `k` above the index size uses the whole index,
            with a warning).
    """
    chunk_size = _chunk_size(chunk_size, "calibrate")
    x = self._query_batch(x, "calibrate")
    check_length("y", y, len(x), required=True)
    self._check_lookup(k)
    return self._index.calibrate(
        self._embed(x),
        y,
        thresholds_targets=dict(thresholds_targets or {}),
        k=k,
        calibration_metric=calibration_metric,
        matcher=matcher,
        extra_metrics=extra_metrics,
        rounding=rounding,
        verbose=verbose,
        chunk_size=chunk_size,
    )


def match(
    self,
    x: Any,
    cutpoint: str = "optimal",
    no_match_label: int = -1,
    k: int = 1,
    matcher: str | ClassificationMatch = "match_nearest",
    verbose: int = 0,
) -> list[int] | dict[str, list[int]]:
    """Matches each example to a class, or to `no_match_label` beyond the cutpoint.

    Args:
        x: Examples to match.
        cutpoint: The name of a calibrated cutpoint, or `"all"` for every
            one. Defaults to `"optimal"`.
        no_match_label: The label of an example whose match is farther
            than the cutpoint's distance. Defaults to -1.
        k: Neighbours the matcher uses. Defaults to 1.
        matcher: See `calibrate`.
        verbose: Unused; kept for 0.17's signature.

    Returns:
        The matched labels (none for an empty `x`), or with
        `cutpoint="all"` a dict of cutpoint name to labels.

    Raises:
        ValueError: If the index is not calibrated or has no such
            cutpoint, or a lookup error (see `lookup`).
    """
    x = self._index_batch(x)
    index = self._index
    if not index.is_calibrated:
        raise ValueError("The index is not calibrated: call model.calibrate(x, y) before match().")
    if cutpoint != "all" and cutpoint not in index.cutpoints:
        raise ValueError(
            f"No cutpoint {cutpoint!r}; the calibration made {sorted(index.cutpoints)}. "
            "Pass one of them or 'all'."
        )
    self._check_lookup(k)
    matches = index.match(
        self._embed(x),
        no_match_label=no_match_label,
        k=k,
        matcher=matcher,
        verbose=verbose,
    )
    return matches if cutpoint == "all" else matches[cutpoint]


def evaluate_classification(
    self,
    x: Any,
    y: Any,
    k: int = 1,
    extra_metrics: Sequence[str | ClassificationMetric] = ("precision", "recall"),
    matcher: str | ClassificationMatch = "match_nearest",
    verbose: int = 1,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> dict[str, dict[str, Any]]:
    """Computes classification metrics of the matches at each calibrated cutpoint.

    Args:
        x: Examples to match.
        y: Their classes.
        k: Neighbours the matcher uses. Defaults to 1.
        extra_metrics: Metrics computed besides the calibration metric.
        matcher: See `calibrate`.
        verbose: Print the results if 1. Defaults to 1.
        chunk_size: Queries the index searches and matches at a time
            (`Indexer.evaluate_classification`). Defaults to 8192. The
            values do not depend on it.

    Returns:
        Cutpoint name to a dict of `"name"`, `"distance"` and each
        metric's value there.

    Raises:
        ValueError: If `x` is empty, the index is not calibrated,
            `chunk_size` is below 1, or a lookup error.
    """
    chunk_size = _chunk_size(chunk_size, "evaluate_classification")
    x = self._query_batch(x, "evaluate_classification")
    check_length("y", y, len(x), required=True)
    index = self._index
    if not index.is_calibrated:
        raise ValueError(
            "The index is not calibrated: call model.calibrate(x, y) before "
            "evaluate_classification()."
        )
    self._check_lookup(k)
    embeddings = self._embed(x)
    calibrated = index.get_calibration_metric()
    results: dict[str, dict[str, Any]] = {}
    for name, cutpoint in index.cutpoints.items():
        threshold = float(cutpoint["distance"])
        metrics = [make_classification_metric(m) for m in extra_metrics]
        metrics.append(make_classification_metric(copy.copy(calibrated)))
        values = index.evaluate_classification(
            embeddings,
            y,
            [threshold],
            metrics=metrics,
            matcher=matcher,
            k=k,
            verbose=0,
            chunk_size=chunk_size,
        )
        row: dict[str, Any] = {"name": name, "distance": threshold}
        row.update({m.name: float(np.asarray(values[m.name])[0]) for m in metrics})
        results[name] = row
    if verbose:
        headers = list(next(iter(results.values())))
        print(format_table([[r[h] for h in headers] for r in results.values()], headers))
    return results


def _query_batch(self, x: Any, verb: str) -> Any:
    """`_index_batch(x)`, refused when empty: a metric of no queries has no value."""
    x = self._index_batch(x)
    if len(x) == 0:
        raise ValueError(
            f"{verb} needs at least one query example; x is empty. Pass labelled examples."
        )
    return x


def _chunk_size(chunk_size: Any, verb: str) -> int:
    """`chunk_size` checked before anything is predicted."""
    return check_int("chunk_size", chunk_size, minimum=1, owner=f"SimilarityModel.{verb}")
