"""The base class of matchers: one label and distance per query, counted at thresholds."""

from __future__ import annotations

import abc
import math
from typing import Any

import keras
import numpy as np
import tensorflow as tf


@keras.saving.register_keras_serializable(package="Similarity")
class ClassificationMatch(abc.ABC):
    """Derives a label and a distance per query from its neighbours, and counts matches.

    `derive_match(lookup_labels, lookup_distances)` (each subclass) gives
    the `[n, 1]` derived labels and distances. `compute_count` compares them
    with the query labels at each of the thresholds set by `compile`: a
    query is a true positive at a threshold when its derived label is right
    and its derived distance is at most the threshold, a false positive when
    the label is wrong and the distance within, a false negative when the
    label is right but the distance beyond, a true negative when wrong and
    beyond. The counts are then `tp`, `fp`, `tn`, `fn` (`[T]` tensors of
    Keras' float type, as in 0.17, one per threshold, thresholds ascending)
    and `count`.

    Args:
        name: The matcher's name.
        canonical_name: Its general name.
    """

    default_name = "match"
    default_canonical_name = "match"

    def __init__(self, name: str | None = None, canonical_name: str | None = None) -> None:
        self.name = self.default_name if name is None else str(name)
        self.canonical_name = (
            self.default_canonical_name if canonical_name is None else str(canonical_name)
        )
        self.distance_thresholds: np.ndarray | None = None
        self._counts: dict[str, np.ndarray] | None = None
        self._count: int | None = None

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{self.canonical_name}:{self.name}"

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "canonical_name": self.canonical_name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ClassificationMatch:
        return cls(**config)

    def compile(self, distance_thresholds: Any = None) -> None:
        """Sets the distance thresholds, sorted ascending (`[inf]` when `None`).

        Raises:
            ValueError: If the thresholds are not a non-empty 1-D array of
                numbers without NaN.
        """
        if distance_thresholds is None:
            distance_thresholds = [math.inf]
        thresholds = np.asarray(distance_thresholds, dtype=np.float64).reshape(-1)
        if thresholds.size == 0 or np.isnan(thresholds).any():
            raise ValueError(
                f"{type(self).__name__}: distance_thresholds must be one or more numbers "
                f"without NaN; got {distance_thresholds!r}."
            )
        self.distance_thresholds = np.sort(thresholds)

    @abc.abstractmethod
    def derive_match(
        self, lookup_labels: np.ndarray, lookup_distances: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Returns the `[n, 1]` derived labels and distances of checked `[n, K]` lookups."""

    def match(self, lookup_labels: Any, lookup_distances: Any) -> tuple[np.ndarray, np.ndarray]:
        """Checks the lookups and returns `derive_match`'s `[n, 1]` labels and distances.

        Raises:
            ValueError: If the lookups are not two `[n, K]` arrays with `K >= 1`.
        """
        lookup_labels, lookup_distances = self._check_lookups(lookup_labels, lookup_distances)
        return self.derive_match(lookup_labels, lookup_distances)

    def compute_count(self, query_labels: Any, lookup_labels: Any, lookup_distances: Any) -> None:
        """Counts tp, fp, tn and fn at each threshold; read them from `tp`, `fp`, ...

        `reset_count`, then `update_count` of all the queries at once.

        Args:
            query_labels: `[n]` labels of the queries.
            lookup_labels: `[n, K]` labels of their neighbours, nearest first.
            lookup_distances: `[n, K]` distances of the neighbours.

        Raises:
            ValueError: If the shapes disagree. `compile()` defaults to the
                single threshold `inf` when it was not called.
        """
        outcomes = self.derive_outcomes(query_labels, lookup_labels, lookup_distances)
        self.reset_count()
        self.update_count(*outcomes)

    def derive_outcomes(
        self, query_labels: Any, lookup_labels: Any, lookup_distances: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per query, whether its derived label is its own, and its derived distance.

        Args:
            query_labels: `[n]` labels of the queries.
            lookup_labels: `[n, K]` labels of their neighbours, nearest first.
            lookup_distances: `[n, K]` distances of the neighbours.

        Returns:
            `[n]` booleans and the `[n]` distances `derive_match` gives, the
            two things the counts at any threshold are made of.

        Raises:
            ValueError: If the shapes disagree.
        """
        query_labels = np.asarray(query_labels).reshape(-1)
        lookup_labels, lookup_distances = self._check_lookups(lookup_labels, lookup_distances)
        if len(lookup_labels) != len(query_labels):
            raise ValueError(
                f"{type(self).__name__}: {len(query_labels)} query labels but "
                f"{len(lookup_labels)} rows of lookups. Pass one row per query."
            )
        labels, distances = (
            np.asarray(v) for v in self.derive_match(lookup_labels, lookup_distances)
        )
        return labels.reshape(-1) == query_labels, distances.reshape(-1)

    def reset_count(self) -> None:
        """Sets the counts at each threshold to 0, for `update_count` to add to.

        `compile()` defaults to the single threshold `inf` when it was not
        called.
        """
        if self.distance_thresholds is None:
            self.compile()
        zeros = np.zeros(len(self.distance_thresholds), np.float64)
        self._counts = {key: zeros.copy() for key in ("tp", "fp", "fn", "tn")}
        self._count = 0

    def update_count(self, right: Any, distances: Any) -> None:
        """Adds queries to the counts at each threshold, from `derive_outcomes`.

        Counting is by sorting, so memory is that of the queries and of the
        thresholds, never of both multiplied; the queries of a large set can
        be added in chunks, with the same counts as at once.

        Args:
            right: `[n]` whether each query's derived label is its own.
            distances: `[n]` the derived distances; a query is within a
                threshold when its distance is at most the threshold (NaN
                never is).

        Raises:
            ValueError: If the two do not have one value per query.
            AttributeError: If `reset_count` (or `compute_count`) was not
                called first.
        """
        right = np.asarray(right, dtype=bool).reshape(-1)
        # float64 holds any float32 distance exactly and is what `<=` against the
        # float64 thresholds compares in.
        distances = np.asarray(distances, dtype=np.float64).reshape(-1)
        if len(right) != len(distances):
            raise ValueError(
                f"{type(self).__name__}: {len(right)} outcomes but {len(distances)} "
                "distances. Pass one of each per query."
            )
        if self._counts is None:
            raise AttributeError(
                f"{type(self).__name__}: reset_count() must be called before update_count()."
            )
        thresholds = self.distance_thresholds
        # NumPy sorts NaN last, so searching a threshold never counts it, as `<=` does not.
        within_right = np.searchsorted(np.sort(distances[right]), thresholds, side="right")
        within_wrong = np.searchsorted(np.sort(distances[~right]), thresholds, side="right")
        num_right = int(right.sum())
        num_wrong = len(right) - num_right
        self._counts["tp"] += within_right
        self._counts["fp"] += within_wrong
        self._counts["fn"] += num_right - within_right
        self._counts["tn"] += num_wrong - within_wrong
        self._count += len(right)

    @property
    def tp(self) -> tf.Tensor:
        """True positives at each threshold: right label, distance within."""
        return self._read("tp")

    @property
    def fp(self) -> tf.Tensor:
        """False positives at each threshold: wrong label, distance within."""
        return self._read("fp")

    @property
    def tn(self) -> tf.Tensor:
        """True negatives at each threshold: wrong label, distance beyond."""
        return self._read("tn")

    @property
    def fn(self) -> tf.Tensor:
        """False negatives at each threshold: right label, distance beyond."""
        return self._read("fn")

    @property
    def count(self) -> int:
        """The number of queries counted."""
        if self._count is None:
            self._read("tp")
        return self._count

    def _read(self, key: str) -> tf.Tensor:
        # A `[T]` tensor in Keras' float type, as 0.17 returned.
        if self._counts is None:
            raise AttributeError(
                f"{type(self).__name__}: Matcher.compute_count() must be called before "
                "accessing the counts."
            )
        return tf.constant(self._counts[key], dtype=keras.backend.floatx())

    def _check_lookups(self, lookup_labels: Any, lookup_distances: Any):
        lookup_labels, lookup_distances = np.asarray(lookup_labels), np.asarray(lookup_distances)
        if (
            lookup_labels.ndim != 2
            or lookup_labels.shape != lookup_distances.shape
            or lookup_labels.shape[1] == 0
        ):
            raise ValueError(
                f"{type(self).__name__}: lookup_labels and lookup_distances must both be "
                f"[n, K] with K >= 1; got shapes {list(lookup_labels.shape)} and "
                f"{list(lookup_distances.shape)}."
            )
        return lookup_labels, lookup_distances
