"""Precision@K."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from tensorflow_similarity._validation import check_bool
from tensorflow_similarity.retrieval_metrics.retrieval_metric import RetrievalMetric


@keras.saving.register_keras_serializable(package="Similarity")
class PrecisionAtK(RetrievalMetric):
    r"""Precision@K: the fraction of relevant neighbours among the `k` nearest.

    $P_i@k = \frac{1}{R_i} \sum_{j=1}^{k} rel_{ij}$ where `R_i = k`, or the
    number of indexed examples of the query's class `r[label]` when `r` is
    given. With `clip_at_r=True` only the first `R_i` neighbours count: that
    is R-precision (Musgrave et al., "A Metric Learning Reality Check",
    ECCV 2020, section 3.2; see `RPrecision`). Unordered: ranks within the
    `k` do not matter.

    Args:
        r: Class id -> number of indexed examples of that class, or `None`.
            Defaults to `None`.
        clip_at_r: Whether only the first `r[label]` neighbours count (then
            `.name` is the bare name). Defaults to False.
        name: Defaults to `"precision"`.
        **kwargs: See `RetrievalMetric`.

    Example:

    >>> from tensorflow_similarity.retrieval_metrics import PrecisionAtK
    >>> PrecisionAtK(k=4).compute(query_labels=[1], lookup_labels=[[1, 0, 1, 1]])
    0.75
    """

    default_name = "precision"
    default_canonical_name = "precision@k"

    def __init__(
        self,
        r: Mapping[int, int] | None = None,
        clip_at_r: bool = False,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name, **kwargs)
        self.r = None if r is None else {int(label): int(count) for label, count in r.items()}
        self.clip_at_r = check_bool("clip_at_r", clip_at_r, owner=type(self).__name__)
        if self.clip_at_r and self.r is None:
            raise ValueError(
                f"{type(self).__name__}: clip_at_r=True needs r, the number of indexed "
                "examples of each class."
            )

    @property
    def name(self) -> str:
        return self._name if self.clip_at_r else super().name

    def get_config(self) -> dict[str, Any]:
        r = None if self.r is None else {str(label): count for label, count in self.r.items()}
        return {**super().get_config(), "r": r, "clip_at_r": self.clip_at_r}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PrecisionAtK:
        config = dict(config)
        if config.get("r") is not None:  # JSON keys are strings
            config["r"] = {int(label): count for label, count in config["r"].items()}
        return cls(**config)

    def _gains(self, relevant: np.ndarray) -> np.ndarray:
        """What each of the first `k` neighbours adds to the sum: 1 per relevant one."""
        return relevant.astype(np.float64)

    def _per_query(self, relevant: np.ndarray, query_labels: np.ndarray) -> np.ndarray:
        gains = self._gains(relevant[:, : self.k])
        counts = self._class_counts(self.r, query_labels)
        if self.clip_at_r:
            ranks = np.arange(1, gains.shape[1] + 1)
            gains = np.where(ranks[np.newaxis, :] <= counts[:, np.newaxis], gains, 0.0)
        totals = gains.sum(axis=1)
        return np.divide(totals, counts, out=np.zeros_like(totals), where=counts > 0)
