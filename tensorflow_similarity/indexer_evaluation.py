"""The measuring half of the `Indexer`: metrics of its neighbours, calibration, matching."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.classification_metrics import (
    ClassificationMetric,
    make_classification_metric,
)
from tensorflow_similarity.matchers import ClassificationMatch, make_classification_matcher
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.text_table import format_table
from tensorflow_similarity.types import (
    CalibrationResults,
    unpack_lookup_distances,
    unpack_lookup_labels,
)


class IndexerEvaluation:
    """What an `Indexer` does with its neighbours' labels: evaluate, calibrate, match.

    Mixed into `Indexer`, which provides `batch_lookup`, `size`,
    `_embeddings`, `evaluator` and the calibration attributes
    (`is_calibrated`, `calibration_metric`, `cutpoints`,
    `calibration_thresholds`) these methods read and set.
    """

    def evaluate_retrieval(
        self,
        predictions: Any,
        target_labels: Sequence[int],
        retrieval_metrics: Sequence[RetrievalMetric],
        verbose: int = 1,
    ) -> dict[str, Any]:
        """Computes retrieval metrics of the queries' neighbours.

        Args:
            predictions: The queries' `[n, dim]` embeddings.
            target_labels: The `n` queries' labels.
            retrieval_metrics: `RetrievalMetric` instances (such as
                `RecallAtK(k=1)`).
            verbose: Unused; kept for 0.17's signature.

        Returns:
            Metric name (such as `"recall@1"`) to its value.

        Raises:
            ValueError: For a metric that is not a `RetrievalMetric`, a metric's
                `k` above the index size, or labels not matching the queries.
        """
        del verbose
        metrics = list(retrieval_metrics)
        for metric in metrics:
            if not isinstance(metric, RetrievalMetric):
                raise ValueError(
                    f"{metric!r} is not a RetrievalMetric. Pass instances such as "
                    "RecallAtK(k=1) or PrecisionAtK(k=5)."
                )
        if not metrics:
            raise ValueError("retrieval_metrics is empty: pass at least one RetrievalMetric.")
        embeddings = self._embeddings(predictions)
        check_labels(target_labels, len(embeddings), "target_labels")
        k = max(metric.k for metric in metrics)
        # One neighbour more, as 0.17: a metric that drops the closest lookup still has k.
        k = min(k + 1, max(self.size(), k))
        lookups = self.batch_lookup(embeddings, k=k, verbose=0)
        return self.evaluator.evaluate_retrieval(
            target_labels=target_labels, lookups=lookups, retrieval_metrics=metrics
        )

    def evaluate_classification(
        self,
        predictions: Any,
        target_labels: Sequence[int],
        distance_thresholds: Sequence[float] | np.ndarray,
        metrics: Sequence[str | ClassificationMetric] = ("f1",),
        matcher: str | ClassificationMatch = "match_nearest",
        k: int = 1,
        verbose: int = 1,
    ) -> dict[str, np.ndarray]:
        """Computes classification metrics of the matches at each distance threshold.

        Args:
            predictions: The queries' `[n, dim]` embeddings.
            target_labels: The `n` queries' labels.
            distance_thresholds: Distances at which to compute the metrics.
            metrics: `ClassificationMetric`s or their names. Defaults to
                `("f1",)`.
            matcher: `"match_nearest"`, `"match_majority_vote"` or a
                `ClassificationMatch`. Defaults to `"match_nearest"`.
            k: Neighbours per query the matcher uses. Defaults to 1.
            verbose: Passed to the evaluator.

        Returns:
            `"distance"` and each metric's name to its values at the
            thresholds.

        Raises:
            ValueError: For an unknown metric or matcher, labels not matching
                the queries, or a lookup error (see `batch_lookup`).
        """
        metric_objects = [make_classification_metric(m) for m in metrics]
        matcher = make_classification_matcher(matcher)
        embeddings = self._embeddings(predictions)
        query_labels = check_labels(target_labels, len(embeddings), "target_labels")
        lookups = self.batch_lookup(embeddings, k=k, verbose=0)
        return self.evaluator.evaluate_classification(
            query_labels=query_labels,
            lookup_labels=unpack_lookup_labels(lookups),
            lookup_distances=unpack_lookup_distances(lookups),
            distance_thresholds=np.asarray(distance_thresholds, dtype=np.float32).reshape(-1),
            metrics=metric_objects,
            matcher=matcher,
            verbose=verbose,
        )

    def calibrate(
        self,
        predictions: Any,
        target_labels: Sequence[int],
        thresholds_targets: Mapping[str, float],
        calibration_metric: str | ClassificationMetric = "f1_score",
        k: int = 1,
        matcher: str | ClassificationMatch = "match_nearest",
        extra_metrics: Sequence[str | ClassificationMetric] = ("precision", "recall"),
        rounding: int = 2,
        verbose: int = 1,
    ) -> CalibrationResults:
        """Chooses the distance thresholds `match` uses, from labelled queries.

        Args:
            predictions: The queries' `[n, dim]` embeddings.
            target_labels: The `n` queries' labels.
            thresholds_targets: Cutpoint name to a target value of the
                calibration metric, e.g. `{"0.9": 0.9}`.
            calibration_metric: The `ClassificationMetric` (or its name)
                calibrated. Defaults to `"f1_score"`.
            k: Neighbours per query the matcher uses. Defaults to 1.
            matcher: See `evaluate_classification`.
            extra_metrics: Metrics also reported at each cutpoint.
            rounding: Decimals the metric values are rounded to. Defaults
                to 2.
            verbose: Print the cutpoints if 1. Defaults to 1.

        Returns:
            `CalibrationResults`; its cutpoints are kept for `match` and
            `save`.

        Raises:
            ValueError: For an unknown metric or matcher, labels not matching
                the queries, or a lookup error (see `batch_lookup`).
        """
        calibration_metric = make_classification_metric(calibration_metric)
        extra = [make_classification_metric(m) for m in extra_metrics]
        matcher = make_classification_matcher(matcher)
        rounding = check_int("rounding", rounding, minimum=0, owner="Indexer.calibrate")
        embeddings = self._embeddings(predictions)
        check_labels(target_labels, len(embeddings), "target_labels")
        lookups = self.batch_lookup(embeddings, k=k, verbose=0)
        results = self.evaluator.calibrate(
            target_labels=target_labels,
            lookups=lookups,
            thresholds_targets=dict(thresholds_targets),
            calibration_metric=calibration_metric,
            matcher=matcher,
            extra_metrics=extra,
            metric_rounding=rounding,
            verbose=verbose,
        )
        if verbose:
            rows = list(results.cutpoints.values())
            headers = ["name", "value", "distance"]
            headers += [key for key in rows[0] if key not in headers]
            print(format_table([[row[h] for h in headers] for row in rows], headers))
        self.is_calibrated = True
        self.calibration_metric = calibration_metric
        self.cutpoints = {name: dict(cutpoint) for name, cutpoint in results.cutpoints.items()}
        self.calibration_thresholds = {k: np.asarray(v) for k, v in results.thresholds.items()}
        return results

    def get_calibration_metric(self) -> ClassificationMetric:
        """Returns the metric the last `calibrate` used."""
        return self.calibration_metric

    def match(
        self,
        predictions: Any,
        no_match_label: int = -1,
        k: int = 1,
        matcher: str | ClassificationMatch = "match_nearest",
        verbose: int = 1,
    ) -> dict[str, list[int]]:
        """Matches each query to a class at every calibrated cutpoint.

        Args:
            predictions: The queries' `[n, dim]` embeddings.
            no_match_label: The label of a query whose match is farther than
                the cutpoint's distance. Defaults to -1.
            k: Neighbours per query the matcher uses. Defaults to 1.
            matcher: See `evaluate_classification`.
            verbose: Unused; kept for 0.17's signature.

        Returns:
            Cutpoint name to the `n` matched labels.

        Raises:
            ValueError: If the index is not calibrated, or a lookup error (see
                `batch_lookup`).
        """
        del verbose
        if not self.is_calibrated:
            raise ValueError(
                "The index is not calibrated: call calibrate(x, y) with labelled examples "
                "before match()."
            )
        matcher = make_classification_matcher(matcher)
        no_match_label = check_int("no_match_label", no_match_label, owner="Indexer.match")
        lookups = self.batch_lookup(self._embeddings(predictions), k=k, verbose=0)
        labels, distances = matcher.derive_match(
            lookup_labels=unpack_lookup_labels(lookups),
            lookup_distances=unpack_lookup_distances(lookups),
        )
        labels = np.asarray(labels).reshape(-1)
        distances = np.asarray(distances).reshape(-1)
        matches = {}
        for name, cutpoint in self.cutpoints.items():
            threshold = float(cutpoint["distance"])
            matches[name] = [
                int(label) if distance <= threshold else no_match_label
                for label, distance in zip(labels, distances, strict=True)
            ]
        return matches


def as_label(label: Any) -> int | None:
    """`label` as a plain int (or `None`): an int, a NumPy integer, or one in a 1-element array
    or tensor (0.17's `index_single(x, y=tf.constant([1]))`).

    Raises:
        ValueError: If `label` holds more than one value.
    """
    if label is None:
        return None
    array = np.asarray(label)
    if array.size != 1:
        raise ValueError(f"A label is one integer (or None); got {array.size} values: {label!r}.")
    # Plain ints: NumPy scalars in Lookups slow every comparison down the line.
    return int(array.reshape(()))


def check_labels(labels: Any, num: int, name: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != num:
        raise ValueError(
            f"Got {name} of shape {labels.shape} for {num} examples. Pass one integer "
            "label per example."
        )
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name} must be integers (class ids); got dtype {labels.dtype}.")
    return labels
