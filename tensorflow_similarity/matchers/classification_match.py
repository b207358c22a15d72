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

        Args:
            query_labels: `[n]` labels of the queries.
            lookup_labels: `[n, K]` labels of their neighbours, nearest first.
            lookup_distances: `[n, K]` distances of the neighbours.

        Raises:
            ValueError: If the shapes disagree. `compile()` defaults to the
                single threshold `inf` when it was not called.
        """
        query_labels = np.asarray(query_labels).reshape(-1)
        lookup_labels, lookup_distances = self._check_lookups(lookup_labels, lookup_distances)
        if len(lookup_labels) != len(query_labels):
            raise ValueError(
                f"{type(self).__name__}: {len(query_labels)} query labels but "
                f"{len(lookup_labels)} rows of lookups. Pass one row per query."
            )
        if self.distance_thresholds is None:
            self.compile()
        labels, distances = (
            np.asarray(v) for v in self.derive_match(lookup_labels, lookup_distances)
        )
        right = labels.reshape(-1, 1) == query_labels[:, np.newaxis]
        within = distances.reshape(-1, 1) <= self.distance_thresholds[np.newaxis, :]
        self._counts = {
            "tp": np.sum(right & within, axis=0).astype(np.float64),
            "fp": np.sum(~right & within, axis=0).astype(np.float64),
            "fn": np.sum(right & ~within, axis=0).astype(np.float64),
            "tn": np.sum(~right & ~within, axis=0).astype(np.float64),
        }
        self._count = len(query_labels)

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
