"""The base class of classification metrics computed from match counts."""

from __future__ import annotations

import abc
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_bool


@keras.saving.register_keras_serializable(package="Similarity")
class ClassificationMetric(abc.ABC):
    """A metric of the matches at each of a set of distance thresholds.

    A matcher (`MatchNearest`, `MatchMajorityVote`) derives one label and one
    distance per query and counts, at each threshold, true positives (label
    right, distance within the threshold), false positives (label wrong,
    within), false negatives (label right, beyond) and true negatives (label
    wrong, beyond). `compute(tp, fp, tn, fn, count)` turns those `[T]`
    counts into the `[T]` metric; a ratio whose denominator is 0 is 0.
    Calibration picks the threshold that optimises the metric: `maximize`
    says in which direction, `increasing` whether it grows with the
    threshold.

    Args:
        name: The metric's name, e.g. `"f1"`.
        canonical_name: Its general name, e.g. `"f1_score"`.
        maximize: Whether larger is better. Defaults to True.
        increasing: Whether it grows with the distance threshold. Defaults
            to True.
    """

    default_name = "metric"
    default_canonical_name = "metric"
    default_maximize = True
    default_increasing = True

    def __init__(
        self,
        name: str | None = None,
        canonical_name: str | None = None,
        maximize: bool | None = None,
        increasing: bool | None = None,
    ) -> None:
        owner = type(self).__name__
        self.name = self.default_name if name is None else str(name)
        self.canonical_name = (
            self.default_canonical_name if canonical_name is None else str(canonical_name)
        )
        self.maximize = check_bool(
            "maximize", self.default_maximize if maximize is None else maximize, owner=owner
        )
        self.increasing = check_bool(
            "increasing", self.default_increasing if increasing is None else increasing, owner=owner
        )

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{self.canonical_name}:{self.name}"

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "canonical_name": self.canonical_name,
            "maximize": self.maximize,
            "increasing": self.increasing,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ClassificationMetric:
        return cls(**config)

    def compute(self, tp: Any, fp: Any, tn: Any, fn: Any, count: int) -> tf.Tensor:
        """Returns the metric at each threshold, computed in float64.

        Args:
            tp: `[T]` true positives at each threshold.
            fp: `[T]` false positives.
            tn: `[T]` true negatives.
            fn: `[T]` false negatives.
            count: The number of queries.

        Returns:
            A float64 `[T]` tensor (a tensor, as 0.17 returned; `.numpy()`
            gives the array).

        Raises:
            ValueError: If the counts are not four arrays of one shape.
        """
        counts = [np.asarray(value, dtype=np.float64).reshape(-1) for value in (tp, fp, tn, fn)]
        if len({value.shape for value in counts}) != 1:
            raise ValueError(
                f"{type(self).__name__}: tp, fp, tn and fn must have one value per threshold "
                f"each; got shapes {[list(value.shape) for value in counts]}."
            )
        return tf.convert_to_tensor(self._compute(*counts, count))

    @abc.abstractmethod
    def _compute(
        self, tp: np.ndarray, fp: np.ndarray, tn: np.ndarray, fn: np.ndarray, count: int
    ) -> np.ndarray:
        """The metric from float64 `[T]` counts."""


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """`numerator / denominator`, 0 where the denominator is 0."""
    numerator, denominator = np.asarray(numerator, np.float64), np.asarray(denominator, np.float64)
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)
