"""The index: nearest-neighbour search over embeddings, with their labels and data."""

from __future__ import annotations

import collections
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.classification_metrics import (
    ClassificationMetric,
    F1Score,
    make_classification_metric,
)
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.evaluators import Evaluator, MemoryEvaluator
from tensorflow_similarity.indexer import persistence
from tensorflow_similarity.indexer._checks import (
    as_label,
    check_component,
    check_embeddings,
    check_labels,
    check_search,
)
from tensorflow_similarity.indexer._evaluation import (
    DEFAULT_CHUNK_SIZE,
    calibrate_in_chunks,
    calibrate_on_matrices,
    check_retrieval_metrics,
    check_some_queries,
    cutpoints_table,
    evaluate_classification_in_chunks,
    evaluate_retrieval_in_chunks,
    evaluates_on_matrices,
    match_at_cutpoints,
    neighbour_chunks,
    neighbour_matrices,
    rounded_distances,
)
from tensorflow_similarity.indexer.lifecycle import (
    ItemTable,
    compact_items,
    remove_items,
    share_store_rows,
    upsert_items,
)
from tensorflow_similarity.indexer.saved_index import SavedIndex
from tensorflow_similarity.indexer.streaming import add_stream, is_stream
from tensorflow_similarity.indexer.text_table import format_table
from tensorflow_similarity.matchers import ClassificationMatch, make_classification_matcher
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.search import SEARCH_NAMES, Search, make_search
from tensorflow_similarity.stores import MemoryStore, Store
from tensorflow_similarity.types import (
    CalibrationResults,
    Lookup,
)

SEARCHES = SEARCH_NAMES


class Indexer:
    """Embeddings made searchable: a `Search`, a `Store` and an `Evaluator` together.

    `add`/`batch_add` put embeddings (with their labels and data) in the store
    and the search, each item under a new id; `single_lookup`/`batch_lookup`
    return the nearest ones as `Lookup` records (with the item's `id`);
    `remove`, `upsert` and `compact` change the items (see
    `tensorflow_similarity.indexer.lifecycle`); `evaluate_retrieval`, `evaluate_classification`,
    `calibrate` and `match` measure and use the neighbours' labels; `save`
    and `load` write and read the whole index in a directory. Every argument
    is checked before anything changes, so a bad call leaves the index as it
    was.

    `embedding_fingerprint` names the weights that made the embeddings (a
    hex digest): a model's `index` sets it when it adds to an empty index,
    `save` and `load` keep it, and `reset` forgets it. `None` means unknown
    (embeddings added to the `Indexer` directly, or an index saved before
    fingerprints were recorded). The `Indexer` only keeps it; the model
    compares it with its weights (see `IndexMixin`).

    Item ids are int64, given in order from 0 by a counter that only grows
    and is saved with the index: an id stays its item's across `save`,
    `load`, `remove` and `compact` and is never given to another item.
    The embeddings are held once: by the store, which a `LinearSearch`
    reads in place; a `FaissSearch` keeps its own copy (faiss cannot search
    an outside buffer) and the store the raw rows, which lookups return and
    a rebuild reads.

    Args:
        embedding_size: The dimension of the embeddings.
        distance: A `Distance` or its name. Defaults to `"cosine"`.
        search: `"linear"` (exact, the default), `"faiss"` (`FaissSearch`,
            flat) or a `Search` instance built for the same distance and
            dimension.
        kv_store: `"memory"` (the default) or a `Store` instance (emptied),
            such as a `MemmapStore` for an index larger than memory; `save`
            and `load` keep its kind (see `tensorflow_similarity.indexer.persistence`).
        evaluator: `"memory"` (the default) or an `Evaluator` instance.
        embedding_output: Which output of a multi-output model's prediction
            holds the embeddings, or `None` for a single output.
        stat_buffer_size: How many recent lookup timings `stats()` keeps.

    Raises:
        ValueError: For an unknown distance, search, store or evaluator, or a
            search built for another distance or dimension.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.indexer import Indexer
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
        check_component("search", search, Search, tuple(SEARCHES))
        check_component("kv_store", kv_store, Store, ("memory",))
        check_component("evaluator", evaluator, Evaluator, ("memory",))
        if isinstance(search, Search):
            check_search(search, self.distance, self.embedding_size)
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
        self.embedding_fingerprint: str | None = None
        self._items = ItemTable()
        share_store_rows(self)

    def reset(self) -> None:
        """Empties the index and forgets its calibration and `embedding_fingerprint`.

        The ids start again from 0, as in a new index.
        """
        self._init_structures()

    def size(self) -> int:
        """Returns the number of indexed embeddings (removed ones not counted)."""
        return self._items.alive_count

    def ids(self) -> np.ndarray:
        """Returns the ids of the indexed items, int64, in the order they were added."""
        return self._items.alive_ids()

    def batch_get(self, ids: Sequence[int]) -> tuple[np.ndarray, list[int | None], list[Any]]:
        """Returns the items `ids` as `(embeddings [n, dim], labels, data)`.

        Raises:
            ValueError: If an id is not an indexed item's.
        """
        rows = self._rows_of(ids, "batch_get")
        return self.kv_store.batch_get(rows.tolist())

    # The lifecycle.

    def remove(self, ids: Sequence[int]) -> None:
        """Removes the items `ids`: no lookup, evaluation or `match` returns them again.

        Their ids are never given to another item. `LinearSearch` and faiss'
        flat, hnsw and ivfpq searches mark them removed (tombstones, left
        out of every lookup); the store keeps their rows until `compact`.

        Args:
            ids: Distinct ids of indexed items (`Lookup.id`, `ids()`).

        Raises:
            ValueError: If an id is not an integer, is given twice or is not
                an indexed item's; nothing is removed then.

        Example:

        >>> import numpy as np
        >>> from tensorflow_similarity.indexer import Indexer
        >>> index = Indexer(embedding_size=2, distance="l2")
        >>> index.batch_add(np.array([[0.0, 0.0], [1.0, 1.0]]), labels=[0, 1])
        >>> index.remove([1])
        >>> [(n.id, n.label) for n in index.single_lookup(np.array([0.9, 1.0]), k=1)]
        [(0, 0)]
        """
        remove_items(self, ids)

    def upsert(
        self,
        ids: Sequence[int],
        embeddings: Any,
        labels: Sequence[int] | None = None,
        data: Sequence[Any] | None = None,
    ) -> None:
        """Puts each embedding under its id: replaces the item of an indexed id, adds a new one.

        A replaced item is removed (as `remove`) and added again under its
        id; a new id also moves the counter of `batch_add`'s ids past it.

        Args:
            ids: `n` distinct non-negative integer ids.
            embeddings: `[n, dim]` embeddings (or a multi-output prediction).
            labels: `n` classes, or `None`.
            data: `n` items kept with the embeddings, or `None`.

        Raises:
            ValueError: If the embeddings are not `[n, embedding_size]`, or
                `ids`, `labels` or `data` are not `n` valid items; nothing
                changes then.

        Example:

        >>> import numpy as np
        >>> from tensorflow_similarity.indexer import Indexer
        >>> index = Indexer(embedding_size=2, distance="l2")
        >>> index.batch_add(np.array([[0.0, 0.0], [1.0, 1.0]]), labels=[0, 1])
        >>> index.upsert([0], np.array([[5.0, 5.0]]), labels=[7])
        >>> [(n.id, n.label) for n in index.single_lookup(np.array([5.0, 5.0]), k=1)]
        [(0, 7)]
        """
        embeddings = self._embeddings(embeddings)
        labels, data = self._checked_records(len(embeddings), labels, data)
        upsert_items(self, ids, embeddings, labels, data)

    def compact(self) -> None:
        """Drops removed items from the store and the search, keeping every id.

        Lookups answer the same before and after. The store is rewritten
        without the removed rows; `LinearSearch` and faiss' flat and
        ivfpq delete them in place, faiss' hnsw (which cannot delete) is
        rebuilt from the embeddings it keeps.
        """
        compact_items(self)

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
            label: The example's class: an int or a NumPy integer (or one
                in a 1-element array), or `None`.
            data: What to keep with it (returned by lookups), or `None`.
            build: Kept for 0.17's signature; every search here is queryable
                right after it is added to.
            verbose: Unused; kept for 0.17's signature.

        Raises:
            ValueError: If the embedding is not of size `embedding_size`, or
                `label` is not an integer (a float such as `1.9`, a bool, a
                string), as `batch_add` refuses such labels; nothing is
                added then.
        """
        del build, verbose
        embedding = self._embeddings(prediction, single=True)[0]
        label = as_label(label)
        self.kv_store.add(embedding, label, data)
        self.search.add(embedding, int(self._items.assign(1)[0]))

    def batch_add(
        self,
        predictions: Any,
        labels: Sequence[int] | None = None,
        data: Sequence[Any] | None = None,
        build: bool = True,
        verbose: int = 1,
    ) -> None:
        """Indexes a batch of embeddings, or a stream of batches, all or nothing.

        A stream is a `tf.data.Dataset` or any iterator (a generator, say)
        whose elements are, as Keras' `fit` reads them, `x`, `(x,)`,
        `(x, y)` or `(x, y, data)`: `x` a batch's `[m, dim]` embeddings (or
        multi-output prediction), `y` its `m` labels and `data` its `m`
        items. Each batch is checked, added to the store and the search,
        then dropped before the next is read, so the embeddings are never
        all in memory at once, beyond what the store and the search keep
        there (with a `MemmapStore` and a `FaissOnDiskSearch`, only the
        index's table of ids, 9 bytes an item). The first
        batch decides whether batches carry labels and data; every batch
        must then have the same. If a batch is refused, or the stream or a
        backend raises, the batches already added are removed, the index is
        compacted (as `compact()`, tombstones of earlier removals dropped
        too) and its id counter set back: the index holds and answers what
        it held before the call, and a note on the error says so. A process
        killed during the add never changed a saved index (see `save`):
        it loads as it was saved.

        Args:
            predictions: A model's `[n, dim]` predictions (or a multi-output
                prediction), or a stream of batches as above.
            labels: `n` classes, or `None`. `None` for a stream (its
                elements hold the labels).
            data: `n` items kept with the embeddings, or `None`. `None` for
                a stream.
            build: Kept for 0.17's signature (see `add`).
            verbose: Unused; kept for 0.17's signature.

        Raises:
            ValueError: If the embeddings are not `[n, embedding_size]`, or
                `labels` or `data` does not have `n` items; for a stream, if
                it yields no batch, if `labels` or `data` is given beside it,
                or if a batch is refused (its number, from 0, is named), a
                batch has labels or data where the first had none (or the
                reverse), or an element is not one of the forms above.

        Example:

        >>> import numpy as np
        >>> from tensorflow_similarity.indexer import Indexer
        >>> index = Indexer(embedding_size=2, distance="l2")
        >>> batches = ((np.full((3, 2), i, np.float32), [i] * 3) for i in range(4))
        >>> index.batch_add(batches)
        >>> index.size(), index.single_lookup(np.array([2.9, 3.0]), k=1)[0].label
        (12, 3)
        """
        del build, verbose
        if is_stream(predictions):
            if labels is not None or data is not None:
                raise ValueError(
                    "Indexer.batch_add: labels= and data= go inside a stream's elements, as "
                    "(x, y) or (x, y, data) tuples; got a stream and labels or data beside it."
                )
            add_stream(self, predictions)
            return
        self._add_checked(*self._checked_batch(predictions, labels, data))

    def _checked_batch(
        self, predictions: Any, labels: Sequence[int] | None, data: Sequence[Any] | None
    ) -> tuple[np.ndarray, Any, Any]:
        """`(embeddings, labels, data)` of one batch, checked as `batch_add` checks them."""
        embeddings = self._embeddings(predictions)
        return (embeddings, *self._checked_records(len(embeddings), labels, data))

    def _add_checked(self, embeddings: np.ndarray, labels: Any, data: Any) -> None:
        """Adds a checked batch to the store, then under new ids to the search."""
        if len(embeddings) == 0:
            return
        self.kv_store.batch_add(embeddings, labels, data)
        self.search.batch_add(embeddings, self._items.assign(len(embeddings)))

    def _checked_records(
        self, num: int, labels: Sequence[int] | None, data: Sequence[Any] | None
    ) -> tuple[Any, Any]:
        if labels is not None:
            labels = check_labels(labels, num, "labels")
        if data is not None and len(data) != num:
            raise ValueError(
                f"Got {len(data)} data items for {num} embeddings. Pass one item per "
                "embedding, or data=None."
            )
        return labels, data

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
            ValueError: If the index is empty, `k` is below 1 or the
                embedding is not of size `embedding_size`. A `k` above
                `size()` returns the whole index, with a warning, as 0.17 did.
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
            `inf`), which counts as a miss and has no vote. Each distinct
            neighbour is read from the store once, so the `Lookup`s of one
            neighbour share its `embedding` array and `data`.

        Raises:
            ValueError: If the index is empty, `k` is below 1 or the
                embeddings are not `[n, embedding_size]`. A `k` above `size()`
                returns the whole index, with a warning, as 0.17 did.
        """
        del verbose
        embeddings = self._embeddings(predictions)
        idxs, distances = self._search(embeddings, k)
        start = time.perf_counter()
        positions, nn_embeddings, labels, data = self._neighbour_records(idxs)
        # faiss' -1: a neighbour the approximate search did not find.
        found = idxs >= 0
        found_distances = distances[found].tolist()
        found_ids = idxs[found].tolist()
        positions = positions.tolist()
        lookups = []
        offset = 0
        for count in found.sum(axis=1).tolist():
            lookups.append(
                [
                    Lookup(
                        rank=rank + 1,
                        distance=found_distances[offset + rank],
                        label=labels[position],
                        embedding=nn_embeddings[position],
                        data=data[position],
                        id=found_ids[offset + rank],
                    )
                    for rank, position in enumerate(positions[offset : offset + count])
                ]
            )
            offset += count
        self._record_timing(self._last_search_time + time.perf_counter() - start, len(lookups))
        return lookups

    def _neighbour_records(
        self, idxs: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[int | None], list[Any]]:
        """The records of the found neighbours (`idxs >= 0`), each distinct one read once.

        Returns:
            For each found id in row-major order its position in the
            records, then the records' embeddings, labels and data.
        """
        ids, positions = np.unique(idxs[idxs >= 0], return_inverse=True)
        nn_embeddings, labels, data = self.kv_store.batch_get(self._rows_of(ids, "lookup").tolist())
        return positions.reshape(-1), nn_embeddings, [as_label(label) for label in labels], data

    def _rows_of(self, ids: Any, what: str) -> np.ndarray:
        """The store rows of the items `ids`, or a `ValueError` naming an id not indexed."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        rows = self._items.rows_of(ids)
        if (rows < 0).any():
            raise ValueError(
                f"Indexer.{what}: no item has the id {int(ids[rows < 0][0])}; pass ids of "
                "indexed items (Indexer.ids())."
            )
        return rows

    def _neighbour_matrices(self, embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The `[n, K]` neighbour labels and float64 distances `batch_lookup`'s `Lookup`s hold.

        `unpack_lookup_labels` of `batch_lookup`, and its distances before
        `unpack_lookup_distances` rounds them and makes them float32 (see
        `rounded_distances`), with the same lookup statistics, without a
        `Lookup` per neighbour.
        """
        idxs, distances = self._search(embeddings, k)
        start = time.perf_counter()
        positions, _, labels, _ = self._neighbour_records(idxs)
        lookup_labels, lookup_distances = neighbour_matrices(idxs, distances, labels, positions)
        self._record_timing(self._last_search_time + time.perf_counter() - start, len(idxs))
        return lookup_labels, lookup_distances

    def _search(self, embeddings: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        size = self.size()
        if size == 0:
            raise ValueError(
                "The index is empty: add embeddings first (model.index(x, y) or "
                "Indexer.batch_add) before looking up, evaluating or calibrating."
            )
        k = check_int("k", k, minimum=1, owner="Indexer")
        if k > size:
            # 0.17 returned the whole index; its default k=5 meets small indexes often.
            warnings.warn(
                f"Indexer: k={k} neighbours were asked for but the index holds {size} "
                f"embeddings; each lookup returns {size}. Use k <= {size}, or index more "
                "examples.",
                stacklevel=3,
            )
            k = size
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

    def evaluate_retrieval(
        self,
        predictions: Any,
        target_labels: Sequence[int],
        retrieval_metrics: Sequence[RetrievalMetric],
        verbose: int = 1,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> dict[str, Any]:
        """Computes retrieval metrics of the queries' neighbours.

        The queries are searched and scored `chunk_size` at a time, each
        metric keeping a running average of its per-query scores, so memory
        does not grow with the number of queries. Two things are given all
        the queries at once instead: a metric that overrides `compute` (it
        may be other than a mean over the queries), and an evaluator that
        overrides `evaluate_retrieval` (it is given `batch_lookup`'s
        `Lookup`s).

        Args:
            predictions: The queries' `[n, dim]` embeddings.
            target_labels: The `n` queries' labels.
            retrieval_metrics: `RetrievalMetric` instances (such as
                `RecallAtK(k=1)`).
            verbose: Unused; kept for 0.17's signature.
            chunk_size: Queries searched and scored at a time. Defaults to
                8192. The values do not depend on it.

        Returns:
            Metric name (such as `"recall@1"`) to its value.

        Raises:
            ValueError: For a metric that is not a `RetrievalMetric`, a metric's
                `k` above the index size, labels not matching the queries, or
                a `chunk_size` below 1.
        """
        del verbose
        chunk_size = check_int("chunk_size", chunk_size, minimum=1, owner="Indexer")
        metrics = check_retrieval_metrics(retrieval_metrics)
        embeddings = self._embeddings(predictions)
        check_labels(target_labels, len(embeddings), "target_labels")
        k = max(metric.k for metric in metrics)
        # One neighbour more, as 0.17: a metric that drops the closest lookup still has k.
        k = min(k + 1, max(self.size(), k))
        if evaluates_on_matrices(self.evaluator, "evaluate_retrieval"):
            chunks = neighbour_chunks(
                self._neighbour_matrices, embeddings, k, self.size(), chunk_size
            )
            return evaluate_retrieval_in_chunks(chunks, target_labels, metrics)
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
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> dict[str, np.ndarray]:
        """Computes classification metrics of the matches at each distance threshold.

        The queries are searched and matched `chunk_size` at a time, adding
        to four counts per threshold, so memory does not grow with the
        number of queries (an evaluator overriding `evaluate_classification`
        is given all of them at once).

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
            chunk_size: Queries searched and matched at a time. Defaults to
                8192. The values do not depend on it.

        Returns:
            `"distance"` and each metric's name to its values at the
            thresholds.

        Raises:
            ValueError: For an unknown metric or matcher, labels not matching
                the queries, no queries, a NaN or no threshold, a
                `chunk_size` below 1, or a lookup error (see `batch_lookup`).
        """
        metric_objects = [make_classification_metric(m) for m in metrics]
        matcher = make_classification_matcher(matcher)
        chunk_size = check_int("chunk_size", chunk_size, minimum=1, owner="Indexer")
        embeddings = self._embeddings(predictions)
        query_labels = check_labels(target_labels, len(embeddings), "target_labels")
        if evaluates_on_matrices(self.evaluator, "evaluate_classification"):
            check_some_queries(len(embeddings), "evaluate_classification")
            chunks = neighbour_chunks(
                self._neighbour_matrices, embeddings, k, self.size(), chunk_size
            )
            return evaluate_classification_in_chunks(
                chunks, query_labels, distance_thresholds, metric_objects, matcher
            )
        lookup_labels, lookup_distances = self._neighbour_matrices(embeddings, k)
        return self.evaluator.evaluate_classification(
            query_labels=query_labels,
            lookup_labels=lookup_labels,
            lookup_distances=rounded_distances(lookup_distances),
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
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> CalibrationResults:
        """Chooses the distance thresholds `match` uses, from labelled queries.

        Every distinct neighbour distance is a threshold, so the results
        have a row per distance; the queries are searched and matched
        `chunk_size` at a time, and besides those rows only a flag (matched
        its own label) and a distance per query are kept, never a matrix of
        queries by thresholds. An evaluator overriding `calibrate` is given
        `batch_lookup`'s `Lookup`s of all the queries at once.

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
            chunk_size: Queries searched and matched at a time. Defaults to
                8192. The values do not depend on it.

        Returns:
            `CalibrationResults`; its cutpoints are kept for `match` and
            `save`.

        Raises:
            ValueError: For an unknown metric or matcher, labels not matching
                the queries, no queries, a `chunk_size` below 1, or a lookup
                error (see `batch_lookup`).
        """
        calibration_metric = make_classification_metric(calibration_metric)
        extra = [make_classification_metric(m) for m in extra_metrics]
        matcher = make_classification_matcher(matcher)
        rounding = check_int("rounding", rounding, minimum=0, owner="Indexer.calibrate")
        chunk_size = check_int("chunk_size", chunk_size, minimum=1, owner="Indexer")
        embeddings = self._embeddings(predictions)
        check_labels(target_labels, len(embeddings), "target_labels")
        if evaluates_on_matrices(self.evaluator, "calibrate") and not evaluates_on_matrices(
            self.evaluator, "evaluate_classification"
        ):
            # MemoryEvaluator.calibrate calls the subclass' evaluate_classification once.
            lookup_labels, lookup_distances = self._neighbour_matrices(embeddings, k)
            results = calibrate_on_matrices(
                self.evaluator,
                target_labels,
                lookup_labels,
                lookup_distances,
                thresholds_targets=dict(thresholds_targets),
                calibration_metric=calibration_metric,
                matcher=matcher,
                extra_metrics=extra,
                metric_rounding=rounding,
                verbose=verbose,
            )
        elif evaluates_on_matrices(self.evaluator, "calibrate"):
            check_some_queries(len(embeddings), "calibrate")
            chunks = neighbour_chunks(
                self._neighbour_matrices, embeddings, k, self.size(), chunk_size
            )
            results = calibrate_in_chunks(
                chunks,
                len(embeddings),
                target_labels,
                thresholds_targets=dict(thresholds_targets),
                calibration_metric=calibration_metric,
                matcher=matcher,
                extra_metrics=extra,
                metric_rounding=rounding,
            )
        else:
            results = self.evaluator.calibrate(
                target_labels=target_labels,
                lookups=self.batch_lookup(embeddings, k=k, verbose=0),
                thresholds_targets=dict(thresholds_targets),
                calibration_metric=calibration_metric,
                matcher=matcher,
                extra_metrics=extra,
                metric_rounding=rounding,
                verbose=verbose,
            )
        if verbose:
            print(cutpoints_table(results))
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
        lookup_labels, lookup_distances = self._neighbour_matrices(self._embeddings(predictions), k)
        labels, distances = matcher.derive_match(
            lookup_labels=lookup_labels, lookup_distances=rounded_distances(lookup_distances)
        )
        return match_at_cutpoints(labels, distances, self.cutpoints, no_match_label)

    # Saving and loading.

    def save(self, path: str | Path, compression: bool = True) -> None:
        """Writes the index into the directory `path`, whole or not at all.

        The store and the search write their files, then the metadata
        (`index_metadata.json`: the settings, the calibration and the
        checksums of every file and of itself), into a hidden sibling
        folder; once all is flushed to disk it replaces `path` by renames,
        so a kill or a full disk at any moment leaves `path` holding the
        old save or the new one, and `load` reads either. What is written,
        and how each store is kept, is described in
        `tensorflow_similarity.indexer.persistence`.

        Args:
            path: The directory (created if needed).
            compression: Whether the store compresses its data. Defaults to
                `True`.

        Raises:
            OSError: If a file cannot be written (a full disk, say): it
                names the file (and the space left) and the previous save in
                `path` is unchanged.
        """
        persistence.save_index(self.to_saved_index(), path, compression=compression)

    def to_saved_index(self) -> SavedIndex:
        """Returns the index as `save` writes it: a `SavedIndex` sharing its parts.

        The record holds this index's search, store and item table
        themselves, not copies: `persistence.stage_index` writes it, as
        `save` does, and a model saving its index beside its file does.
        An `Evaluator` instance is recorded as `None` (it is not saved).
        """
        return SavedIndex(
            embedding_size=self.embedding_size,
            distance=self.distance,
            search=self.search,
            kv_store=self.kv_store,
            items=self._items,
            evaluator=self.evaluator_type if isinstance(self.evaluator_type, str) else None,
            embedding_output=self.embedding_output,
            stat_buffer_size=self.stat_buffer_size,
            embedding_fingerprint=self.embedding_fingerprint,
            is_calibrated=self.is_calibrated,
            calibration_metric=self.calibration_metric,
            cutpoints=self.cutpoints,
            calibration_thresholds=self.calibration_thresholds,
        )

    @classmethod
    def from_saved_index(cls, saved: SavedIndex) -> Self:
        """Returns an index of `saved`'s parts and settings, as `load` does with what it read.

        The index takes `saved`'s search, store and item table as they are
        (nothing is emptied or copied), so they must agree: the search
        holds the alive items' ids and a `LinearSearch` reads the store's
        rows, as in a record `persistence.read_index` returns or
        `to_saved_index` made.

        Args:
            saved: The record.

        Returns:
            A new index holding `saved`'s items, fingerprint and calibration.

        Raises:
            ValueError: If a setting of `saved` is one `Indexer()` refuses.
        """
        index = cls(
            embedding_size=saved.embedding_size,
            distance=saved.distance,
            # A placeholder: construction empties a given search and store, and a
            # database's search (MilvusSearch) holds the saved rows themselves.
            search="linear",
            evaluator=saved.evaluator or "memory",
            embedding_output=saved.embedding_output,
            stat_buffer_size=saved.stat_buffer_size,
        )
        index.kv_store_type = index.kv_store = saved.kv_store
        index.search_type = index.search = saved.search
        index._items = saved.items
        index.embedding_fingerprint = saved.embedding_fingerprint
        index.is_calibrated = saved.is_calibrated
        index.calibration_metric = saved.calibration_metric
        index.cutpoints = saved.cutpoints
        index.calibration_thresholds = saved.calibration_thresholds
        return index

    @staticmethod
    def read_metadata(path: str | Path) -> dict[str, Any]:
        """Returns the metadata of the index saved in directory `path`.

        Raises:
            FileNotFoundError: If `path` holds no saved index.
            ValueError: If the metadata is corrupt or of another format
                version.
        """
        return persistence.read_metadata(path)

    @classmethod
    def load(
        cls,
        path: str | Path,
        verbose: int = 1,
        *,
        distance: Distance | str | None = None,
        embedding_size: int | None = None,
        kv_store: Store | None = None,
        safe_mode: bool = True,
        search_options: Mapping[str, Any] | None = None,
    ) -> Self:
        """Reads an index `save` wrote, whole, or refuses it and changes nothing.

        The metadata, the recorded checksums of every file and the files'
        agreement with each other (sizes, ids, finite embeddings) are all
        checked before any record is read into an index; every error names
        the file and what disagrees. `read_index` in
        `tensorflow_similarity.indexer.persistence` lists the checks in order.

        Args:
            path: The directory `save` wrote.
            verbose: Print progress if 1. Defaults to 1.
            distance: If given, the distance the saved index must use.
            embedding_size: If given, the dimension the saved index must have.
            kv_store: A store of the saved store's class to read the records
                into, replacing its own. Defaults to a new one: a `MemoryStore`,
                or a `MemmapStore` on the files in `path` (see
                `tensorflow_similarity.indexer.persistence`).
            safe_mode: If `True` (the default), a store whose records' data
                were saved as pickled Python objects is refused, since
                unpickling runs code the file names. `False` loads it, as
                `keras.saving.load_model(safe_mode=False)` does: only for an
                index you trust.
            search_options: Arguments for the saved search's class that a
                save does not record, given to it with the saved settings:
                the `token` of a Milvus server (`MilvusSearch` never saves
                it), the working `directory` of a `FaissOnDiskSearch`.
                What the save recorded (Milvus' `uri` and `collection`, the
                distance, the dimension) is refused: the saved files are of
                that search. Defaults to none.

        Returns:
            A new `Indexer` with the saved embeddings, labels, data and
            calibration.

        Raises:
            FileNotFoundError: If `path` holds no saved index.
            ValueError: If the saved index is corrupt (a check above fails),
                of another format version, or of another distance or
                dimension than expected, or `kv_store` is not of the saved
                store's class, or (in safe mode) holds pickled data, or
                `search_options` names an argument the save recorded or the
                search does not take; nothing is loaded then.
            ConnectionError: If the saved search is a Milvus collection whose
                server cannot be reached (with `search_options`' token).

        Example:

        >>> import tempfile
        >>> import numpy as np
        >>> from tensorflow_similarity.indexer import Indexer
        >>> index = Indexer(embedding_size=2, distance="l2")
        >>> index.batch_add(np.array([[0.0, 0.0], [1.0, 1.0]]), labels=[0, 1])
        >>> folder = tempfile.mkdtemp()
        >>> index.save(folder)
        >>> Indexer.load(folder, verbose=0).size()
        2

        A Milvus index on a server with authentication:
        `Indexer.load(folder, search_options={"token": "user:password"})`.
        """
        saved = persistence.read_index(
            path,
            verbose=verbose,
            distance=distance,
            embedding_size=embedding_size,
            kv_store=kv_store,
            safe_mode=safe_mode,
            search_options=search_options,
        )
        return cls.from_saved_index(saved)

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

        Removed items are left out (the store keeps their rows until
        `compact`).

        Args:
            num_items: How many records; 0 (default) for all.
        """
        num_items = check_int("num_items", num_items, minimum=0, owner="Indexer")
        if not self._items.dead:
            return self.kv_store.to_data_frame(num_items)
        frame = self.kv_store.to_data_frame(0)[self._items.alive()].reset_index(drop=True)
        return frame if num_items == 0 else frame.head(num_items)

    def _embeddings(self, predictions: Any, single: bool = False) -> np.ndarray:
        return check_embeddings(
            predictions, self.embedding_size, self.embedding_output, single=single
        )
