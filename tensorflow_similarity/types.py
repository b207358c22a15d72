"""The records an index returns, and 0.17's tensor annotations.

`Lookup` is one neighbour of a query and `CalibrationResults` a calibration's
outcome. `Tensor`, `FloatTensor`, `IntTensor`, `BoolTensor`, `Symbol`,
`Value`, `EqFunc` and `PandasDataFrame` are 0.17's names for annotations,
kept so that code annotated with them still imports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

Tensor = tf.Tensor


# As in 0.17, subclasses that only name what a tensor holds: an annotation
# `x: FloatTensor` documents, no tensor is ever an instance of them.
class FloatTensor(tf.Tensor):
    """Annotation of a floating-point `tf.Tensor`."""


class IntTensor(tf.Tensor):
    """Annotation of an integer `tf.Tensor`."""


class BoolTensor(tf.Tensor):
    """Annotation of a boolean `tf.Tensor`."""


class Symbol(tf.Tensor):
    """Annotation of a symbolic (graph) `tf.Tensor`, one without a value yet."""


class Value(tf.Tensor):
    """Annotation of an eager `tf.Tensor`, one that holds a value (`.numpy()`)."""

    def numpy(self) -> np.ndarray:
        """The tensor's value (declared for annotations, as in 0.17; eager tensors define it).

        Raises:
            NotImplementedError: Always: `Value` is never instantiated.
        """
        raise NotImplementedError("types.Value is an annotation; call numpy() on a tensor.")


class PandasDataFrame:
    """Annotation of a `pandas.DataFrame`, without importing pandas."""


# An equality test of two values, as 0.17 annotated its comparison helpers.
EqFunc = Callable[[Any, Any], bool]


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    # Arrays and tensors (0.17's lookups held tensors) compare element-wise.
    if hasattr(a, "__array__") or hasattr(b, "__array__"):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    return bool(a == b)


@dataclasses.dataclass(eq=False)
class Lookup:
    """One neighbour of a query, as `SimilarityModel.lookup` returns it.

    Equality compares every field, arrays element-wise (NaN equal to NaN), so
    that two lookups of the same index compare equal.

    Args:
        rank: 1 for the nearest neighbour, 2 for the next, ...
        distance: The distance from the query to the neighbour.
        label: The neighbour's class, or `None` if it was indexed without one.
        embedding: The neighbour's embedding, or `None`.
        data: What was indexed with the neighbour (`data=` of `index`), or
            `None`.
        id: The neighbour's item id in the index (stable across save,
            load, remove and compact; see `Indexer`), or `None` for a
            lookup built without one (0.17 had no ids).

    Example:

    >>> from tensorflow_similarity.types import Lookup
    >>> Lookup(rank=1, distance=0.1, label=3).label
    3
    """

    rank: int
    distance: float
    label: int | None = None
    embedding: np.ndarray | None = None
    data: Any = None
    id: int | None = None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(
            _same(getattr(self, f.name), getattr(other, f.name)) for f in dataclasses.fields(self)
        )


@dataclasses.dataclass
class CalibrationResults:
    """The distance cutpoints a calibration chose, and every threshold it tried.

    Args:
        cutpoints: Cutpoint name (`"optimal"` and each target of
            `thresholds_targets`) to a dict with the cutpoint's `"name"`, the
            calibration metric's `"value"`, the `"distance"` threshold and
            every computed metric at that distance, e.g.
            `{"optimal": {"name": "optimal", "value": 0.92, "distance": 0.3,
            "f1": 0.92, "precision": 0.9, "recall": 0.94}}`.
        thresholds: Metric name (and `"distance"`, `"value"`) to the array of
            its values at each distance threshold tried, in increasing
            distance.
    """

    cutpoints: Mapping[str, Mapping[str, str | float]]
    thresholds: Mapping[str, np.ndarray]


# Fill values of a short lookup set (0.17's): no label can match it and no threshold admits it.
MISSING_LABEL = 0x7FFFFFFF
MISSING_DISTANCE = np.inf


def unpack_lookup_labels(lookups: Sequence[Sequence[Lookup]]) -> np.ndarray:
    """Returns the `[num_queries, k]` int64 labels of `lookups`.

    A lookup set shorter than the longest is padded with `MISSING_LABEL`.

    Args:
        lookups: Per query, its neighbours (what `batch_lookup` returns).

    Returns:
        The labels, row `i` those of query `i`'s neighbours by rank.

    Raises:
        ValueError: If a neighbour has no label (it was indexed without `y`).
    """
    width = max((len(row) for row in lookups), default=0)
    labels = np.full((len(lookups), width), MISSING_LABEL, dtype=np.int64)
    for i, row in enumerate(lookups):
        for j, neighbour in enumerate(row):
            if neighbour.label is None:
                raise ValueError(
                    "A neighbour has no label: the index holds examples indexed without "
                    "labels. Index them with their labels (index(x, y)) to evaluate, "
                    "calibrate or match."
                )
            labels[i, j] = neighbour.label
    return labels


def unpack_lookup_distances(
    lookups: Sequence[Sequence[Lookup]], rounding: int | None = None
) -> np.ndarray:
    """Returns the `[num_queries, k]` float32 distances of `lookups`.

    A lookup set shorter than the longest is padded with `MISSING_DISTANCE`.

    Args:
        lookups: Per query, its neighbours (what `batch_lookup` returns).
        rounding: Decimals to round the distances to, or `None` to keep them.

    Returns:
        The distances, row `i` those of query `i`'s neighbours by rank.
    """
    width = max((len(row) for row in lookups), default=0)
    distances = np.full((len(lookups), width), MISSING_DISTANCE, dtype=np.float64)
    for i, row in enumerate(lookups):
        distances[i, : len(row)] = [neighbour.distance for neighbour in row]
    if rounding is not None:
        distances = np.round(distances, rounding)
    return distances.astype(np.float32)
