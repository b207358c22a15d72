"""The index: nearest-neighbour search over embeddings, with their labels and data."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.classification_metrics import (
    ClassificationMetric,
    F1Score,
    make_classification_metric,
)
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.evaluators import Evaluator, MemoryEvaluator
from tensorflow_similarity.matchers import ClassificationMatch, make_classification_matcher
from tensorflow_similarity.retrieval_metrics import RetrievalMetric
from tensorflow_similarity.search import SEARCH_NAMES, Search, make_search
from tensorflow_similarity.stores import MemoryStore, Store
from tensorflow_similarity.types import (
    CalibrationResults,
    Lookup,
    unpack_lookup_distances,
    unpack_lookup_labels,
)

METADATA_FILE = "index_metadata.json"
FORMAT_VERSION = 1
SEARCHES = SEARCH_NAMES


class Indexer:
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
        kv_store: `"memory"` (the default) or a `Store` instance.
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
        label = _label(label)
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
            labels = _labels(labels, num, "labels")
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
            `k` `Lookup`s by increasing distance.

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
            Per query, `k` `Lookup`s by increasing distance.

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
            nn_embeddings, labels, data = self.kv_store.batch_get([int(i) for i in row_idxs])
            lookups.append(
                [
                    Lookup(
                        rank=rank + 1,
                        distance=float(row_distances[rank]),
                        label=_label(labels[rank]),
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

    def evaluate_retrieval(
        self,
        predictions: Any,
        target_labels: Sequence[int],
        retrieval_metrics: Sequence[RetrievalMetric],
        verbose: int = 1,
    ) -> dict[str, Any]:
        """Computes retrieval metrics of the queries' neighbours.

        Args:
            predictions: The queries' `[n, dim]` embeddings.
            target_labels: The `n` queries' labels.
            retrieval_metrics: `RetrievalMetric` instances (such as
                `RecallAtK(k=1)`).
            verbose: Unused; kept for 0.17's signature.

        Returns:
            Metric name (such as `"recall@1"`) to its value.

        Raises:
            ValueError: For a metric that is not a `RetrievalMetric`, a metric's
                `k` above the index size, or labels not matching the queries.
        """
        del verbose
        metrics = list(retrieval_metrics)
        for metric in metrics:
            if not isinstance(metric, RetrievalMetric):
                raise ValueError(
                    f"{metric!r} is not a RetrievalMetric. Pass instances such as "
                    "RecallAtK(k=1) or PrecisionAtK(k=5)."
                )
        if not metrics:
            raise ValueError("retrieval_metrics is empty: pass at least one RetrievalMetric.")
        embeddings = self._embeddings(predictions)
        _labels(target_labels, len(embeddings), "target_labels")
        k = max(metric.k for metric in metrics)
        # One neighbour more, as 0.17: a metric that drops the closest lookup still has k.
        k = min(k + 1, max(self.size(), k))
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
    ) -> dict[str, np.ndarray]:
        """Computes classification metrics of the matches at each distance threshold.

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

        Returns:
            `"distance"` and each metric's name to its values at the
            thresholds.

        Raises:
            ValueError: For an unknown metric or matcher, labels not matching
                the queries, or a lookup error (see `batch_lookup`).
        """
        metric_objects = [make_classification_metric(m) for m in metrics]
        matcher = make_classification_matcher(matcher)
        embeddings = self._embeddings(predictions)
        query_labels = _labels(target_labels, len(embeddings), "target_labels")
        lookups = self.batch_lookup(embeddings, k=k, verbose=0)
        return self.evaluator.evaluate_classification(
            query_labels=query_labels,
            lookup_labels=unpack_lookup_labels(lookups),
            lookup_distances=unpack_lookup_distances(lookups),
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
    ) -> CalibrationResults:
        """Chooses the distance thresholds `match` uses, from labelled queries.

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

        Returns:
            `CalibrationResults`; its cutpoints are kept for `match` and
            `save`.

        Raises:
            ValueError: For an unknown metric or matcher, labels not matching
                the queries, or a lookup error (see `batch_lookup`).
        """
        calibration_metric = make_classification_metric(calibration_metric)
        extra = [make_classification_metric(m) for m in extra_metrics]
        matcher = make_classification_matcher(matcher)
        rounding = check_int("rounding", rounding, minimum=0, owner="Indexer.calibrate")
        embeddings = self._embeddings(predictions)
        _labels(target_labels, len(embeddings), "target_labels")
        lookups = self.batch_lookup(embeddings, k=k, verbose=0)
        results = self.evaluator.calibrate(
            target_labels=target_labels,
            lookups=lookups,
            thresholds_targets=dict(thresholds_targets),
            calibration_metric=calibration_metric,
            matcher=matcher,
            extra_metrics=extra,
            metric_rounding=rounding,
            verbose=verbose,
        )
        if verbose:
            rows = list(results.cutpoints.values())
            headers = ["name", "value", "distance"]
            headers += [key for key in rows[0] if key not in headers]
            print(format_table([[row[h] for h in headers] for row in rows], headers))
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
        lookups = self.batch_lookup(self._embeddings(predictions), k=k, verbose=0)
        labels, distances = matcher.derive_match(
            lookup_labels=unpack_lookup_labels(lookups),
            lookup_distances=unpack_lookup_distances(lookups),
        )
        labels = np.asarray(labels).reshape(-1)
        distances = np.asarray(distances).reshape(-1)
        matches = {}
        for name, cutpoint in self.cutpoints.items():
            threshold = float(cutpoint["distance"])
            matches[name] = [
                int(label) if distance <= threshold else no_match_label
                for label, distance in zip(labels, distances, strict=True)
            ]
        return matches

    # Persistence.

    def save(self, path: str | Path, compression: bool = True) -> None:
        """Writes the index (metadata, store, search, calibration) to directory `path`.

        Args:
            path: The directory (created if needed).
            compression: Whether the store compresses its data. Defaults to
                `True`.
        """
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        metadata = {
            "format_version": FORMAT_VERSION,
            "size": self.size(),
            "distance": self.distance.name,
            "embedding_size": self.embedding_size,
            "embedding_output": self.embedding_output,
            "search": _search_name(self.search),
            "search_config": self.search.get_config(),
            "kv_store": self.kv_store_type if isinstance(self.kv_store_type, str) else None,
            "evaluator": self.evaluator_type if isinstance(self.evaluator_type, str) else None,
            "stat_buffer_size": self.stat_buffer_size,
            "is_calibrated": self.is_calibrated,
            "calibration_metric": self.calibration_metric.get_config(),
            "cutpoints": self.cutpoints,
            "calibration_thresholds": {
                k: np.asarray(v).tolist() for k, v in self.calibration_thresholds.items()
            },
        }
        self.kv_store.save(path, compression=compression)
        self.search.save(path)
        (path / METADATA_FILE).write_text(json.dumps(metadata))

    @staticmethod
    def read_metadata(path: str | Path) -> dict[str, Any]:
        """Returns the metadata of the index saved in directory `path`.

        Raises:
            FileNotFoundError: If `path` holds no saved index.
            ValueError: If the metadata is corrupt or of another format
                version.
        """
        file = Path(path) / METADATA_FILE
        if not file.is_file():
            raise FileNotFoundError(
                f"No saved index in {str(path)!r} (no {METADATA_FILE}). Pass the directory "
                "Indexer.save (or SimilarityModel.save_index) wrote."
            )
        try:
            metadata = json.loads(file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"{file} is corrupt ({error}); save the index again.") from None
        version = metadata.get("format_version") if isinstance(metadata, dict) else None
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{file} is of index format version {version!r}; this version reads "
                f"{FORMAT_VERSION}. Re-create the index with this version."
            )
        return metadata

    @staticmethod
    def load(
        path: str | Path,
        verbose: int = 1,
        *,
        distance: Distance | str | None = None,
        embedding_size: int | None = None,
    ) -> Indexer:
        """Reads an index `save` wrote.

        Args:
            path: The directory `save` wrote.
            verbose: Print progress if 1. Defaults to 1.
            distance: If given, the distance the saved index must use.
            embedding_size: If given, the dimension the saved index must have.

        Returns:
            A new `Indexer` with the saved embeddings, labels, data and
            calibration.

        Raises:
            FileNotFoundError: If `path` holds no saved index.
            ValueError: If the saved index is corrupt, of another format
                version, or of another distance or dimension than expected;
                nothing is loaded then.
        """
        metadata = Indexer.read_metadata(path)
        saved_distance = distance_canonicalizer(metadata["distance"])
        if distance is not None and distance_canonicalizer(distance).name != saved_distance.name:
            raise ValueError(
                f"The index in {str(path)!r} was saved with distance "
                f"{saved_distance.name!r}, not {distance_canonicalizer(distance).name!r}. "
                "Create the index (compile or create_index) with the saved distance, or "
                "re-index the examples."
            )
        if embedding_size is not None and metadata["embedding_size"] != embedding_size:
            raise ValueError(
                f"The index in {str(path)!r} holds embeddings of size "
                f"{metadata['embedding_size']}, not {embedding_size}: it was saved from "
                "another model. Load it into a model of that output size, or re-index."
            )
        if metadata["search"] not in SEARCHES:
            raise ValueError(
                f"The index in {str(path)!r} was saved with a search of type "
                f"{metadata['search_config'].get('name', '?')!r}, which Indexer.load cannot "
                f"rebuild (it rebuilds {tuple(SEARCHES)}). Re-index with one of those."
            )
        search = SEARCHES[metadata["search"]].from_config(metadata["search_config"])
        index = Indexer(
            embedding_size=metadata["embedding_size"],
            distance=saved_distance,
            search=search,
            kv_store=metadata["kv_store"] or "memory",
            evaluator=metadata["evaluator"] or "memory",
            embedding_output=metadata["embedding_output"],
            stat_buffer_size=metadata["stat_buffer_size"],
        )
        if verbose:
            print(f"Loading an index of {metadata['size']} embeddings from {path}")
        index.kv_store.load(path)
        index.search.load(path)
        if index.size() != metadata["size"]:
            raise ValueError(
                f"The index in {str(path)!r} is corrupt: its metadata says "
                f"{metadata['size']} embeddings, its store holds {index.size()}. Save it again."
            )
        index.is_calibrated = bool(metadata["is_calibrated"])
        if index.is_calibrated:
            config = metadata["calibration_metric"]
            index.calibration_metric = make_classification_metric(
                config.get("canonical_name", config.get("name")), name=config.get("name", "")
            )
            index.cutpoints = metadata["cutpoints"]
            index.calibration_thresholds = {
                k: np.asarray(v) for k, v in metadata["calibration_thresholds"].items()
            }
        return index

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


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str] | None = None) -> str:
    """Returns `rows` as left-aligned text columns, with an underlined header row."""

    def text(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = [[text(v) for v in row] for row in rows]
    if headers is not None:
        lines = [list(headers), ["-" * len(h) for h in headers], *lines]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))] if lines else []
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


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


def _search_name(search: Search) -> str | None:
    return next((name for name, cls in SEARCHES.items() if type(search) is cls), None)


def _label(label: Any) -> int | None:
    # Plain ints: NumPy scalars in Lookups slow every comparison down the line.
    return None if label is None else int(label)


def _labels(labels: Any, num: int, name: str) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != num:
        raise ValueError(
            f"Got {name} of shape {labels.shape} for {num} examples. Pass one integer "
            "label per example."
        )
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name} must be integers (class ids); got dtype {labels.dtype}.")
    return labels
