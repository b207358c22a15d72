"""`SavedIndex`: an index as its folder holds it, the record `persistence` writes and reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tensorflow_similarity.classification_metrics import ClassificationMetric, F1Score
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.indexer.lifecycle import ItemTable
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store

__all__ = ["SavedIndex"]


@dataclass
class SavedIndex:
    """An index's parts and settings, as `Indexer.save` writes them and `Indexer.load` reads.

    A plain record, so that the saved format (`tensorflow_similarity.indexer.persistence`)
    knows nothing of `Indexer`: `Indexer.to_saved_index()` makes one of an
    index (sharing its search, store and items, copying nothing),
    `persistence.save_index` writes it, `persistence.read_index` reads one
    back, checked whole, and `Indexer.from_saved_index` builds an index of
    it. The search and the store of a record `read_index` returns hold the
    saved records, and a `LinearSearch` reads its embeddings from the store.

    Args:
        embedding_size: The dimension of the embeddings.
        distance: The index's distance.
        search: The search, holding the items' embeddings under their ids.
        kv_store: The store, one row per item (removed ones until compacted).
        items: Per row of the store, its item's id and whether it is alive,
            and the next id to give.
        evaluator: The evaluator's name, or `None` for an `Evaluator`
            instance (which is not saved; the loaded index uses `"memory"`).
        embedding_output: Which output of a multi-output model holds the
            embeddings, or `None`.
        stat_buffer_size: How many lookup timings `Indexer.stats()` keeps.
        embedding_fingerprint: The fingerprint of the weights that made the
            embeddings, or `None` if unknown. Defaults to `None`.
        is_calibrated: Whether `calibrate` set the cutpoints. Defaults to
            `False`.
        calibration_metric: The metric calibrated. Defaults to `F1Score()`.
        cutpoints: Cutpoint name to its values, as `calibrate` chose them.
            Defaults to none.
        calibration_thresholds: Metric name to its values at each threshold.
            Defaults to none.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.indexer import Indexer
    >>> index = Indexer(embedding_size=2, distance="l2")
    >>> index.batch_add(np.eye(2), labels=[0, 1], verbose=0)
    >>> saved = index.to_saved_index()
    >>> saved.items.alive_ids().tolist(), saved.distance.name
    ([0, 1], 'euclidean')
    """

    embedding_size: int
    distance: Distance
    search: Search
    kv_store: Store
    items: ItemTable
    evaluator: str | None
    embedding_output: int | None
    stat_buffer_size: int
    embedding_fingerprint: str | None = None
    is_calibrated: bool = False
    calibration_metric: ClassificationMetric = field(default_factory=F1Score)
    cutpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    calibration_thresholds: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """The number of items (removed ones not counted)."""
        return self.items.alive_count
