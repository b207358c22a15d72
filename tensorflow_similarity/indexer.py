"""The index: nearest-neighbour search over embeddings, with their labels and data."""

from __future__ import annotations

import collections
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.classification_metrics import ClassificationMetric, F1Score
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.evaluators import Evaluator, MemoryEvaluator
from tensorflow_similarity.indexer_evaluation import IndexerEvaluation, as_label, check_labels
from tensorflow_similarity.indexer_persistence import (
    FORMAT_VERSION,
    METADATA_FILE,
    IndexerPersistence,
)
from tensorflow_similarity.search import SEARCH_NAMES, Search, make_search
from tensorflow_similarity.stores import MemoryStore, Store
from tensorflow_similarity.text_table import format_table
from tensorflow_similarity.types import Lookup

__all__ = ["FORMAT_VERSION", "METADATA_FILE", "SEARCHES", "Indexer", "format_table"]

SEARCHES = SEARCH_NAMES


class Indexer(IndexerEvaluation, IndexerPersistence):
    """Embeddings made searchable: a `Search`, a `Store` and an `Evaluator` together.

    `add`/`batch_add` put embeddings (with their labels and data) in the store
    and the search; `single_lookup`/`batch_lookup` return the nearest ones
    as `Lookup` records; `evaluate_retrieval`, `evaluate_classification`,
    `calibrate` and `match` measure and use the neighbours' labels; `save`
    and `load` write and read the whole index in a directory. Every argument
    is checked before anything changes, so a bad call leaves the index as it
    was.

    Args:
        embedding_size: The dimension of the embeddings.
        distance: A `Distance` or its name. Defaults to `"cosine"`.
        search: `"linear"` (exact, the default), `"faiss"` (`FaissSearch`,
            flat) or a `Search` instance built for the same distance and
            dimension.
        kv_store: `"memory"` (the default) or a `Store` instance (emptied),
            such as a `MemmapStore` for an index larger than memory; `save`
            and `load` keep its kind (see `IndexerPersistence`).
        evaluator: `"memory"` (the default) or an `Evaluator` instance.
        embedding_output: Which output of a multi-output model's prediction
            holds the embeddings, or `None` for a single output.
        stat_buffer_size: How many recent lookup timings `stats()` keeps.

    Raises:
        ValueError: For an unknown distance, search, store or evaluator, or a
            search built for another distance or dimension.

    Example:

    >>> index = Indexer(embedding_size=2, distance="l2")
    >>> index.batch_add(np.array([[0.0, 0.0], [1.0, 1.0]]), labels=[0, 1], verbose=0)
    >>> index.single_lookup(np.array([0.9, 1.0]), k=1)[0].label
    1
    """

    def __init__(
        self,
        embedding_size: int,
        distance: Distance | str = "cosine",
        search: Search | str = "linear",
        kv_store: Store | str = "memory",
        evaluator: Evaluator | str = "memory",
        embedding_output: int | None = None,
        stat_buffer_size: int = 1000,
    ) -> None:
        self.embedding_size = check_int(
            "embedding_size", embedding_size, minimum=1, owner="Indexer"
        )
        self.distance = distance_canonicalizer(distance)
        self.embedding_output = check_int(
            "embedding_output", embedding_output, minimum=0, allow_none=True, owner="Indexer"
        )
        self.stat_buffer_size = check_int(
            "stat_buffer_size", stat_buffer_size, minimum=1, owner="Indexer"
        )
        _check_component("search", search, Search, tuple(SEARCHES))
        _check_component("kv_store", kv_store, Store, ("memory",))
        _check_component("evaluator", evaluator, Evaluator, ("memory",))
        if isinstance(search, Search):
            _check_search(search, self.distance, self.embedding_size)
        self.search_type = search
        self.kv_store_type = kv_store
        self.evaluator_type = evaluator
        self._init_structures()

    def _init_structures(self) -> None:
        if isinstance(self.search_type, Search):
            self.search_type.reset()
            self.search = self.search_type
        else:
            self.search = make_search(self.search_type, self.distance, self.embedding_size)
        if isinstance(self.kv_store_type, Store):
            self.kv_store_type.reset()
            self.kv_store = self.kv_store_type
        else:
            self.kv_store = MemoryStore()
        self.evaluator = (
            self.evaluator_type if isinstance(self.evaluator_type, Evaluator) else MemoryEvaluator()
        )
        self._stats: collections.Counter[str] = collections.Counter()
        self._lookup_timings: collections.deque[float] = collections.deque(
            maxlen=self.stat_buffer_size
        )
        self.is_calibrated = False
        self.calibration_metric: ClassificationMetric = F1Score()
        self.cutpoints: dict[str, dict[str, Any]] = {}
        self.calibration_thresholds: dict[str, np.ndarray] = {}

    def reset(self) -> None:
        """Empties the index and forgets its calibration."""
        self._init_structures()

    def size(self) -> int:
        """Returns the number of indexed embeddings."""
        return self.kv_store.size()

    # Adding.

    def add(
        self,
        prediction: Any,
        label: int | None = None,
        data: Any = None,
        build: bool = True,
        verbose: int = 1,
    ) -> None:
        """Indexes one embedding.

        Args:
            prediction: A model's prediction for one example: a `[1, dim]` or
                `[dim]` embedding, or a multi-output prediction.
            label: The example's class, or `None`.
            data: What to keep with it (returned by lookups), or `None`.
            build: Kept for 0.17's signature; every search here is queryable
                right after it is added to.
            verbose: Unused; kept for 0.17's signature.

        Raises:
            ValueError: If the embedding is not of size `embedding_size`.
        """
        del build, verbose
        embedding = self._embeddings(prediction, single=True)[0]
        label = as_label(label)
        idx = self.kv_store.add(embedding, label, data)
        self.search.add(embedding, idx)

    def batch_add(
        self,
        predictions: Any,
        labels: Sequence[int] | None = None,
        data: Sequence[Any] | None = None,
        build: bool = True,
        verbose: int = 1,
    ) -> None:
        """Indexes a batch of embeddings.

        Args:
            predictions: A model's `[n, dim]` predictions (or a multi-output
                prediction).
            labels: `n` classes, or `None`.
            data: `n` items kept with the embeddings, or `None`.
            build: Kept for 0.17's signature (see `add`).
            verbose: Unused; kept for 0.17's signature.

        Raises:
            ValueError: If the embeddings are not `[n, embedding_size]`, or
                `labels` or `data` does not have `n` items.
        """
        del build, verbose
        embeddings = self._embeddings(predictions)
        num = len(embeddings)
        if labels is not None:
            labels = check_labels(labels, num, "labels")
        if data is not None and len(data) != num:
            raise ValueError(
                f"Got {len(data)} data items for {num} embeddings. Pass one item per "
                "embedding, or data=None."
            )
        if num == 0:
            return
        idxs = self.kv_store.batch_add(embeddings, labels, data)
        self.search.batch_add(embeddings, idxs)

    # Looking up.

    def single_lookup(self, prediction: Any, k: int = 5) -> list[Lookup]:
        """Returns the `k` nearest indexed embeddings of one embedding, nearest first.

        Args:
            prediction: A model's prediction for one example (see `add`).
            k: How many neighbours. Defaults to 5.

        Returns:
            `k` `Lookup`s by increasing distance, or fewer (see
            `batch_lookup`).

        Raises:
            ValueError: If the index is empty, `k` is not in `[1, size()]` or
                the embedding is not of size `embedding_size`.
        """
        embedding = self._embeddings(prediction, single=True)
        return self.batch_lookup(embedding, k=k, verbose=0)[0]

    def batch_lookup(self, predictions: Any, k: int = 5, verbose: int = 1) -> list[list[Lookup]]:
        """Returns the `k` nearest indexed embeddings of each embedding, nearest first.

        Args:
            predictions: A model's `[n, dim]` predictions (see `batch_add`).
            k: How many neighbours per query. Defaults to 5.
            verbose: Unused; kept for 0.17's signature.

        Returns:
            Per query, its `Lookup`s by increasing distance: `k`, or fewer
            when an approximate search (`FaissSearch` hnsw or ivfpq) found
            fewer. The missing ones (faiss' id -1) are left out, not padded;
            the evaluation and matching verbs pad them back as
            `unpack_lookup_labels` does (label `MISSING_LABEL`, distance
            `inf`), which counts as a miss and has no vote.

        Raises:
            ValueError: If the index is empty, `k` is not in `[1, size()]` or
                the embeddings are not `[n, embedding_size]`.
        """
        del verbose
        embeddings = self._embeddings(predictions)
        idxs, distances = self._search(embeddings, k)
        start = time.perf_counter()
        lookups = []
        for row_idxs, row_distances in zip(idxs, distances, strict=True):
            # faiss' -1: a neighbour the approximate search did not find.
            found = row_idxs >= 0
            row_idxs, row_distances = row_idxs[found], row_distances[found]
            nn_embeddings, labels, data = self.kv_store.batch_get([int(i) for i in row_idxs])
            lookups.append(
                [
                    Lookup(
                        rank=rank + 1,
                        distance=float(row_distances[rank]),
                        label=as_label(labels[rank]),
                        embedding=nn_embeddings[rank],
                        data=data[rank],
                    )
                    for rank in range(len(row_idxs))
                ]
            )
        self._record_timing(self._last_search_time + time.perf_counter() - start, len(lookups))
        return lookups

    def _search(self, embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        size = self.size()
        if size == 0:
            raise ValueError(
                "The index is empty: add embeddings first (model.index(x, y) or "
                "Indexer.batch_add) before looking up, evaluating or calibrating."
            )
        k = check_int("k", k, minimum=1, owner="Indexer")
        if k > size:
            raise ValueError(
                f"k={k} neighbours were asked for but the index holds {size} embeddings. "
                f"Use k <= {size}, or index more examples."
            )
        start = time.perf_counter()
        if len(embeddings) == 0:
            idxs, distances = np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        else:
            idxs, distances = self.search.batch_lookup(embeddings, k=k)
        self._last_search_time = time.perf_counter() - start
        return np.asarray(idxs), np.asarray(distances)

    def _record_timing(self, seconds: float, num_queries: int) -> None:
        if num_queries:
            self._lookup_timings.extend([seconds / num_queries] * min(num_queries, 10_000))
        self._stats["num_lookups"] += num_queries

    # Evaluation and calibration.

    # Reporting.

    def stats(self) -> dict[str, Any]:
        """Returns the index size, the number of lookups and per-query lookup timings."""
        timings = list(self._lookup_timings) or [0.0]
        return {
            "num_lookups": self._stats["num_lookups"],
            "size": self.size(),
            "stat_buffer_size": self.stat_buffer_size,
            "query_performance": {
                "min": float(np.min(timings)),
                "max": float(np.max(timings)),
                "avg": float(np.mean(timings)),
                "median": float(np.median(timings)),
                "stddev": float(np.std(timings)),
            },
        }

    def print_stats(self) -> None:
        """Prints the index's configuration and `stats()`."""
        stats = self.stats()
        info = [
            ["distance", self.distance.name],
            ["key value store", type(self.kv_store).__name__],
            ["search algorithm", type(self.search).__name__],
            ["evaluator", type(self.evaluator).__name__],
            ["index size", stats["size"]],
            ["calibrated", self.is_calibrated],
            ["calibration_metric", self.calibration_metric.name],
            ["embedding_output", self.embedding_output],
        ]
        print("[Info]")
        print(format_table(info))
        performance = [["num lookups", stats["num_lookups"]]]
        performance += [[k, v] for k, v in stats["query_performance"].items()]
        print("\n[Performance]")
        print(format_table(performance))

    def to_data_frame(self, num_items: int = 0) -> Any:
        """Returns the indexed records as a pandas `DataFrame` (needs pandas).

        Args:
            num_items: How many records; 0 (default) for all.
        """
        return self.kv_store.to_data_frame(num_items)

    # Argument checks.

    def _embeddings(self, predictions: Any, single: bool = False) -> np.ndarray:
        if isinstance(self.embedding_output, int) and isinstance(predictions, (list, tuple)):
            predictions = predictions[self.embedding_output]
        embeddings = np.asarray(predictions)
        if single and embeddings.ndim == 1:
            embeddings = embeddings[None]
        if embeddings.ndim != 2 or embeddings.shape[1] != self.embedding_size:
            wanted = f"[{self.embedding_size}]" if single else f"[n, {self.embedding_size}]"
            raise ValueError(
                f"Expected embeddings of shape {wanted}, got {embeddings.shape}. Pass the "
                f"outputs of the model the index was created for (size "
                f"{self.embedding_size})."
            )
        if single and len(embeddings) != 1:
            raise ValueError(
                f"Expected one embedding, got {len(embeddings)}. Use batch_add/batch_lookup "
                "for several."
            )
        if not np.issubdtype(embeddings.dtype, np.floating):
            embeddings = embeddings.astype(np.float32)
        return embeddings


def _check_component(name: str, value: Any, base: type, names: tuple[str, ...]) -> None:
    if isinstance(value, base) or (isinstance(value, str) and value in names):
        return
    raise ValueError(
        f"Indexer: {name} must be one of {names} or a {base.__name__} instance. "
        f"Received: {name}={value!r}."
    )


def _check_search(search: Search, distance: Distance, dim: int) -> None:
    search_distance = getattr(search, "distance", None)
    if (
        search_distance is not None
        and distance_canonicalizer(search_distance).name != distance.name
    ):
        raise ValueError(
            f"The search {search!r} uses distance {distance_canonicalizer(search_distance).name!r} "
            f"but the index {distance.name!r}. Build the search with distance={distance.name!r}."
        )
    search_dim = getattr(search, "dim", None)
    if search_dim is not None and search_dim != dim:
        raise ValueError(
            f"The search {search!r} is for embeddings of size {search_dim} but the index "
            f"for size {dim}. Build the search with dim={dim}."
        )
