"""The base class of retrieval metrics: how good are the k nearest neighbours of each query."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from tensorflow_similarity._validation import check_bool, check_choice, check_int, check_number


def compute_match_mask(query_labels: Any, lookup_labels: Any) -> np.ndarray:
    """Returns the `[n, K]` boolean mask of the lookups whose label is their query's.

    Args:
        query_labels: `[n]` labels of the queries.
        lookup_labels: `[n, K]` labels of each query's neighbours, nearest
            first.

    Returns:
        `lookup_labels == query_labels[:, None]`.

    Raises:
        ValueError: If `lookup_labels` is not `[n, K]` for the `n` queries.
    """
    query_labels = np.asarray(query_labels).reshape(-1)
    lookup_labels = np.asarray(lookup_labels)
    if lookup_labels.ndim != 2 or len(lookup_labels) != len(query_labels):
        raise ValueError(
            f"lookup_labels must be [n, K], one row of lookups per query label, with n = "
            f"{len(query_labels)}; got shape {list(lookup_labels.shape)}."
        )
    return lookup_labels == query_labels[:, np.newaxis]


@keras.saving.register_keras_serializable(package="Similarity")
def k_at_r(r: Mapping[int, int], k: int | None, drop_closest_lookup: bool) -> int:
    """The neighbours an "at R" metric looks at: `k`, else the largest `R` (less the query).

    Args:
        r: Class id -> number of indexed examples of that class.
        k: The neighbours asked for, or `None`.
        drop_closest_lookup: Whether the query itself is among the indexed examples.

    Returns:
        A positive number of neighbours.
    """
    if k is None:
        k = max(r.values(), default=1) - int(drop_closest_lookup)
    return max(int(k), 1)


class RetrievalMetric:
    """A score of the nearest neighbours of a batch of queries, from their match mask.

    `compute` takes, per query, the labels or the match mask of its `K >= k`
    neighbours (nearest first) and their distances. The base prepares the
    `[n, k]` boolean "relevant" matrix once: it drops the nearest lookup
    when `drop_closest_lookup` (the queries are indexed themselves), keeps
    the next `k`, and counts a neighbour farther than `distance_threshold`
    as not relevant (0.17 applied the threshold in `BNDCG` only). Each
    subclass scores each query (`_per_query`); the base averages: `"micro"`
    is the mean over queries, `"macro"` the unweighted mean over the query
    classes of each class's mean.

    Args:
        name: The metric's name; `.name` appends `@k` (and the threshold
            when finite), as 0.17 did: `"recall@5"`.
        canonical_name: The metric's general name, e.g. `"recall@k"`.
        k: How many neighbours are scored. Defaults to 5.
        distance_threshold: Neighbours farther than this are not relevant.
            Defaults to `inf`.
        average: `"micro"` or `"macro"`. Defaults to `"micro"`.
        drop_closest_lookup: Whether to skip each query's nearest neighbour,
            for a query set that is also the indexed set. Defaults to False.

    Raises:
        ValueError: If an argument is out of range.
    """

    default_name = "metric"
    default_canonical_name = "metric@k"

    def __init__(
        self,
        name: str | None = None,
        canonical_name: str | None = None,
        k: int = 5,
        distance_threshold: float = math.inf,
        average: str = "micro",
        drop_closest_lookup: bool = False,
    ) -> None:
        owner = type(self).__name__
        self._name = self.default_name if name is None else str(name)
        self.canonical_name = (
            self.default_canonical_name if canonical_name is None else str(canonical_name)
        )
        self.k = check_int("k", k, minimum=1, owner=owner)
        self.distance_threshold = check_number(
            "distance_threshold", distance_threshold, finite=False, owner=owner
        )
        self.average = check_choice(
            "average",
            average,
            ("micro", "macro"),
            owner=owner,
            hint="micro averages over queries, macro over classes.",
        )
        self.drop_closest_lookup = check_bool(
            "drop_closest_lookup", drop_closest_lookup, owner=owner
        )

    @property
    def name(self) -> str:
        if math.isfinite(self.distance_threshold):
            return f"{self._name}@{self.k} : distance_threshold@{self.distance_threshold}"
        return f"{self._name}@{self.k}"

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{self.canonical_name} : {self.name}"

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self._name,
            "canonical_name": self.canonical_name,
            "k": self.k,
            "distance_threshold": self.distance_threshold,
            "average": self.average,
            "drop_closest_lookup": self.drop_closest_lookup,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RetrievalMetric:
        return cls(**config)

    @property
    def lookups_needed(self) -> int:
        """How many neighbours per query `compute` needs."""
        return self.k + int(self.drop_closest_lookup)

    def compute(
        self,
        *,
        query_labels: Any,
        lookup_labels: Any = None,
        lookup_distances: Any = None,
        match_mask: Any = None,
    ) -> float:
        """Returns the metric over a batch of queries.

        Args:
            query_labels: `[n]` integer labels of the queries.
            lookup_labels: `[n, K]` labels of their neighbours, nearest first;
                needed when `match_mask` is not given.
            lookup_distances: `[n, K]` distances of the neighbours; needed
                when `distance_threshold` is finite.
            match_mask: `[n, K]` booleans, whether each neighbour has its
                query's label. Defaults to `compute_match_mask` of the labels.

        Returns:
            The metric, a float.

        Raises:
            ValueError: If the shapes disagree, `K` is smaller than `k` (plus
                one with `drop_closest_lookup`), or a needed input is missing.
        """
        query_labels = np.asarray(query_labels).reshape(-1)
        per_query = self.score_queries(
            query_labels=query_labels,
            lookup_labels=lookup_labels,
            lookup_distances=lookup_distances,
            match_mask=match_mask,
        )
        return _average(per_query, query_labels, self.average)

    def score_queries(
        self,
        *,
        query_labels: Any,
        lookup_labels: Any = None,
        lookup_distances: Any = None,
        match_mask: Any = None,
    ) -> np.ndarray:
        """Returns each query's score, which `compute` averages.

        Each query is scored on its own neighbours only, so the queries of a
        large set can be scored in chunks and averaged after (as
        `Indexer.evaluate_retrieval` does).

        Args:
            query_labels: See `compute`.
            lookup_labels: See `compute`.
            lookup_distances: See `compute`.
            match_mask: See `compute`.

        Returns:
            The `[n]` float64 scores.

        Raises:
            ValueError: As `compute`.
        """
        owner = type(self).__name__
        query_labels = np.asarray(query_labels).reshape(-1)
        if match_mask is None:
            if lookup_labels is None:
                raise ValueError(f"{owner}.compute needs lookup_labels or match_mask.")
            match_mask = compute_match_mask(query_labels, lookup_labels)
        match_mask = np.asarray(match_mask).astype(bool)
        if match_mask.ndim != 2 or len(match_mask) != len(query_labels):
            raise ValueError(
                f"{owner}: the match mask must be [n, K] with n = {len(query_labels)} queries "
                f"(one row of lookups per query label); got shape {list(match_mask.shape)}."
            )
        if match_mask.shape[1] < self.lookups_needed:
            raise ValueError(
                f"{owner}: {self.name} needs {self.lookups_needed} neighbours per query but got "
                f"{match_mask.shape[1]}. Look up at least k={self.lookups_needed} neighbours."
            )
        if lookup_distances is not None and len(np.asarray(lookup_distances)) != len(query_labels):
            raise ValueError(
                f"{owner}: The number of lookup distance rows must equal the number of query "
                f"labels. Number of lookup distance rows is {len(np.asarray(lookup_distances))} "
                f"but the number of query labels is {len(query_labels)}."
            )
        start = int(self.drop_closest_lookup)
        relevant = match_mask[:, start:]
        if math.isfinite(self.distance_threshold):
            if lookup_distances is None:
                raise ValueError(
                    f"{owner}: distance_threshold={self.distance_threshold} needs the "
                    "lookup_distances."
                )
            lookup_distances = np.asarray(lookup_distances)
            if lookup_distances.shape != match_mask.shape:
                raise ValueError(
                    f"{owner}: lookup_distances must have the match mask's shape "
                    f"{list(match_mask.shape)}; got {list(lookup_distances.shape)}."
                )
            relevant = relevant & (lookup_distances[:, start:] <= self.distance_threshold)
        return self._per_query(relevant, query_labels)

    def _per_query(self, relevant: np.ndarray, query_labels: np.ndarray) -> np.ndarray:
        """Returns the `[n]` float64 scores of the queries.

        A subclass implements this, or overrides `compute` whole (0.17's way
        of writing a retrieval metric, which still works).

        Args:
            relevant: `[n, K']` booleans, nearest first, already without the
                dropped lookup and with the threshold applied; the subclass
                keeps the first `k` columns (or as many as it needs).
            query_labels: `[n]` labels.

        Raises:
            NotImplementedError: If the subclass implements neither this nor
                `compute`.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement _per_query(relevant, query_labels), or "
            "override compute()."
        )

    def _class_counts(self, r: Mapping[int, int] | None, query_labels: np.ndarray) -> np.ndarray:
        """The `[n]` number of indexed examples of each query's class (`k` without `r`).

        With `drop_closest_lookup` the query itself is among them and is not
        counted. A class missing from `r` counts 0 (its queries score 0).
        """
        if r is None:
            return np.full(len(query_labels), self.k, dtype=np.int64)
        counts = np.array([int(r.get(int(label), 0)) for label in query_labels], dtype=np.int64)
        if self.drop_closest_lookup:
            counts = np.maximum(counts - 1, 0)
        return counts


def _average(per_query: np.ndarray, query_labels: np.ndarray, average: str) -> float:
    if len(per_query) == 0:
        return 0.0
    if average == "micro":
        return float(np.mean(per_query))
    classes = np.unique(query_labels)
    return float(np.mean([np.mean(per_query[query_labels == label]) for label in classes]))
