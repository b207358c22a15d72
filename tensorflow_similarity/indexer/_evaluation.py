"""What the `Indexer`'s measuring verbs do with their neighbours beyond the `Evaluator`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorflow_similarity.indexer.text_table import format_table
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.types import CalibrationResults


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
