"""Nearest-neighbour search in a Milvus collection: Milvus Lite (a local file) or a cluster."""

from __future__ import annotations

import importlib
import importlib.util
import json
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import keras
import numpy as np

from tensorflow_similarity import _atomic
from tensorflow_similarity._validation import check_int, check_number, is_int
from tensorflow_similarity.distances import (
    CosineDistance,
    Distance,
    EuclideanDistance,
    InnerProductSimilarity,
    SquaredEuclideanDistance,
)
from tensorflow_similarity.search.search import Search

# 2: the record holds "max_visible_id". Version 1 still loads, every row visible.
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
FILE_NAME = "milvus_search.json"
ID_FIELD, VECTOR_FIELD, LABEL_FIELD, NAME_FIELD = "id", "embedding", "label", "name"
NAME_MAX_LENGTH = 1024
# Index parameters used when none are given: HNSW and IVF_FLAT reach recall@10 >= 0.95 with
# their search parameters below on a few thousand clustered embeddings
# (tests/search/test_milvus_search.py measures it); not at a million on Milvus Lite
# (benchmark.index_scale).
DEFAULT_INDEX_PARAMS: dict[str, dict[str, Any]] = {
    "FLAT": {},
    "HNSW": {"M": 16, "efConstruction": 200},
    "IVF_FLAT": {"nlist": 128},
}
DEFAULT_SEARCH_PARAMS: dict[str, dict[str, Any]] = {
    "FLAT": {},
    "HNSW": {"ef": 128},
    "IVF_FLAT": {"nprobe": 32},
}
_METRICS = {
    CosineDistance: "COSINE",
    InnerProductSimilarity: "IP",
    EuclideanDistance: "L2",
    SquaredEuclideanDistance: "L2",
}


def import_pymilvus(owner: str = "MilvusSearch") -> ModuleType:
    """Returns the `pymilvus` module, or raises an ImportError naming the install."""
    try:
        return importlib.import_module("pymilvus")
    except ImportError as err:
        raise ImportError(
            f"{owner} needs pymilvus (and milvus-lite for a local file), which is not "
            "installed. Install them with: pip install 'tensorflow-similarity[milvus]'."
        ) from err


def is_local_uri(uri: str) -> bool:
    """Whether `uri` names a Milvus Lite file (pymilvus' rule: a path ending in `.db`)."""
    return uri.endswith(".db") and "://" not in uri and not uri.startswith("unix:")


@keras.saving.register_keras_serializable(package="Similarity")
class MilvusSearch(Search):
    """k-nearest-neighbour search in a Milvus collection (`pip install '...[milvus]'`).

    The same client code reaches an embedded Milvus Lite database (a local
    file: `uri="index.db"`) and a Milvus server or cluster
    (`uri="http://host:19530"`): moving an index from one to the other is a
    change of `uri`. Each row holds the item's id as the int64 primary key,
    its embedding, and optionally an int64 `label` and a `name` (up to
    1024 characters), so a lookup can be filtered on them (`filter=`,
    Milvus' boolean expressions such as `"label == 3"`). The database holds
    the data: `save` writes only how to reach the collection, and `load`
    reconnects to it.

    Creating a `MilvusSearch` connects to `uri` and opens `collection` if it
    exists, after checking that it was made for the same dimension, metric
    and index type, or creates it. `reset` drops and recreates the
    collection, and an `Indexer` given this search resets it: do not hand
    an `Indexer` a collection whose rows you want to keep (reopen it with
    `Indexer.load`, or use the search directly).

    `index_type="FLAT"` (the default) is exact: lookups equal `LinearSearch`'s.
    `"HNSW"` and `"IVF_FLAT"` are approximate, with default index and search
    parameters chosen for recall@10 >= 0.95 on a few thousand clustered
    embeddings; larger collections need more (`search_params`, such as a
    larger `nprobe` or `ef`: measure recall on your own). Any other Milvus
    index type is passed through with the parameters given.
    Distances are reported as `LinearSearch` reports them: Milvus' cosine
    similarity `s` becomes `1 - s`, inner product is negated, and its
    squared L2 becomes the Euclidean distance by a square root
    (`"squared_euclidean"` keeps it). Should an approximate index find
    fewer than `k` neighbours, the missing ones are id -1 at distance `inf`.

    Ids are unique: `batch_add` refuses an id the collection holds (Milvus
    itself would keep both rows); `upsert` replaces rows, `remove` deletes
    them.

    Adds are isolated from readers of a save, as an `Indexer` adds: under
    ids above every id the collection held. The search shows only the ids
    up to `max_visible_id` (every count, id listing and lookup, a
    `filter=` included, is bounded by it); its own adds and upserts raise
    the bound, `save` records it and `load` restores it. A process that
    loads a save therefore sees exactly the saved rows while a writer
    appends more, and the rows of an add that a crash interrupted (after
    the save, before the next) stay invisible: the first write after a
    `load` deletes them, with a `UserWarning` saying how many, before an
    id can be given again. Removals, and upserts of ids the search shows,
    are not isolated: Milvus applies them to the collection at once, so a
    reader sees them before the save, and an index saved before a removal
    no longer loads (its rows are gone). One process writes a collection
    at a time; a second writer's first write would delete the first's
    unsaved rows. A search created on an existing collection (not loaded)
    shows every row.

    Requests are sent `batch_size` rows or queries at a time, read
    with strong consistency, and wait at most `timeout` seconds. Milvus
    Lite's exact L2 search holds a `[queries, rows, dim]` array per request:
    lower `batch_size` (or use cosine, inner product or an approximate
    index) for a large L2 collection on Milvus Lite.

    A Milvus Lite file given as a relative path is resolved against the
    working directory when the search is created, and saved as an absolute
    path: `load` reopens the same file wherever the save folder goes. To
    open a moved file, create a `MilvusSearch` with its new `uri`.

    Args:
        distance: A `Distance` or its name: cosine, inner_product,
            euclidean or squared_euclidean. Defaults to `"cosine"`.
        dim: The size of the embeddings.
        uri: A Milvus Lite file (a path ending in `.db`, whose folder must
            exist) or a server URI (`http://host:19530`, `https://...`).
        collection: The collection's name. Defaults to `"tfsim_index"`.
        index_type: The Milvus index type. Defaults to `"FLAT"` (exact).
        index_params: The index's build parameters. Defaults to those of
            `DEFAULT_INDEX_PARAMS` for the index type, else none.
        search_params: The search parameters. Defaults to those of
            `DEFAULT_SEARCH_PARAMS` for the index type, else none.
        token: A server's access token (`"user:password"`). Never saved:
            `load` reconnects with the token this search was created with.
            Defaults to none.
        timeout: Seconds to wait for the server on each request. Defaults
            to 10.
        batch_size: Rows per insert and queries per search request.
            Defaults to 256.
        verbose: Verbosity (see `Search`). Defaults to 0.
        name: The index's name. Defaults to `"milvus"`.

    Raises:
        ImportError: If pymilvus (or, for a local file, milvus-lite) is not
            installed.
        ValueError: If the distance or an argument is not supported, or the
            collection exists with another dimension, metric or index type.
        ConnectionError: If the server at `uri` cannot be reached.

    Example:

    >>> import tempfile
    >>> import numpy as np
    >>> from tensorflow_similarity.search import MilvusSearch
    >>> uri = f"{tempfile.mkdtemp()}/index.db"  # or "http://localhost:19530" for a server
    >>> search = MilvusSearch("l2", dim=2, uri=uri, collection="example")
    >>> search.batch_add(np.array([[0.0, 0.0], [3.0, 4.0]]), idxs=[10, 11])
    >>> idxs, distances = search.lookup(np.array([3.0, 3.0]), k=2)
    >>> idxs.tolist(), [round(float(d), 4) for d in distances]
    ([11, 10], [1.0, 4.2426])
    """

    default_name = "milvus"

    def __init__(
        self,
        distance: Distance | str = "cosine",
        dim: int = 0,
        uri: str | None = None,
        collection: str = "tfsim_index",
        index_type: str = "FLAT",
        index_params: dict[str, Any] | None = None,
        search_params: dict[str, Any] | None = None,
        token: str = "",
        timeout: float = 10.0,
        batch_size: int = 256,
        verbose: int = 0,
        name: str | None = None,
    ) -> None:
        super().__init__(distance=distance, dim=dim, verbose=verbose, name=name)
        owner = type(self).__name__
        if not isinstance(uri, str) or not uri.strip():
            raise ValueError(
                f"{owner} needs uri=: a Milvus Lite file such as uri='index.db', or a server "
                f"such as uri='http://localhost:19530'. Received: uri={uri!r}. Where a search "
                f"is named, pass search={owner}(distance, dim, uri=...) instead of 'milvus'."
            )
        if not isinstance(collection, str) or not collection.strip():
            raise ValueError(f"{owner}: collection must be a non-empty name, got {collection!r}.")
        if not isinstance(index_type, str) or not index_type.strip():
            raise ValueError(f"{owner}: index_type must be a Milvus index type such as 'FLAT'.")
        metric = next((m for cls, m in _METRICS.items() if type(self.distance) is cls), None)
        if metric is None:
            raise ValueError(
                f"{owner} supports the distances cosine, inner_product, euclidean and "
                f"squared_euclidean (Milvus' COSINE, IP and L2); got {self.distance.name!r}. "
                "Use LinearSearch for it."
            )
        self.metric = metric
        self.uri = str(Path(uri).expanduser().resolve()) if is_local_uri(uri) else uri
        self.collection = collection
        self.index_type = index_type.strip().upper()
        self.index_params = dict(
            DEFAULT_INDEX_PARAMS.get(self.index_type, {}) if index_params is None else index_params
        )
        self.search_params = dict(
            DEFAULT_SEARCH_PARAMS.get(self.index_type, {})
            if search_params is None
            else search_params
        )
        self.token = str(token)
        self.timeout = check_number("timeout", timeout, positive=True, owner=owner)
        self.batch_size = check_int("batch_size", batch_size, minimum=1, owner=owner)
        self._pymilvus = import_pymilvus(owner)
        self._client = self._connect()
        # None shows every row; set by _open_collection, reset, load and each write.
        self._max_visible_id: int | None = None
        # Whether rows above the bound (an interrupted add's) may exist and go before a write.
        self._leftovers_pending = False
        self._open_collection()

    @property
    def is_exact(self) -> bool:
        """Whether lookups are exact (a FLAT index)."""
        return self.index_type == "FLAT"

    @property
    def max_visible_id(self) -> int | None:
        """The largest id this search shows, or `None` if it shows every row.

        -1 for a new or reset collection; raised by this search's adds and
        upserts; recorded by `save` and restored by `load`. `None` for a
        search created on an existing collection, or loaded from a save of
        format version 1.
        """
        return self._max_visible_id

    # Search's verbs.

    def size(self) -> int:
        rows = self._call(
            "count the rows",
            self._client.query,
            self.collection,
            filter=self._visible(),
            output_fields=["count(*)"],
            consistency_level="Strong",
        )
        return int(rows[0]["count(*)"])

    def reset(self) -> None:
        """Drops the collection and creates it again, empty."""
        self._call("drop the collection", self._client.drop_collection, self.collection)
        self._create_collection()
        self._max_visible_id, self._leftovers_pending = -1, False

    def batch_add(
        self,
        embeddings: Any,
        idxs: Sequence[int],
        verbose: int | None = None,
        *,
        labels: Sequence[int] | None = None,
        names: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """Adds `embeddings[i]` under the id `idxs[i]`, with its label and name if given.

        Args:
            embeddings: `[n, dim]` embeddings.
            idxs: `n` integer ids, none of them in the collection already.
            verbose: Print a line naming the index, how many embeddings were
                added and its size if 1. `None` (default) takes the index's.
            labels: `n` integer labels stored with the rows, or `None`.
            names: `n` strings stored with the rows, or `None`.
            **kwargs: Ignored (see `Search.add`).

        Raises:
            ValueError: If an argument is malformed, an id repeats, or the
                collection holds one of the ids already (use `upsert`).
            RuntimeError: If the collection was dropped, or the server failed.
        """
        rows = self._checked_rows(embeddings, idxs, labels, names, what="batch_add")
        owner = type(self).__name__
        verbose = (
            self.verbose
            if verbose is None
            else check_int("verbose", verbose, minimum=0, owner=owner)
        )
        self._insert(*rows)
        if verbose:
            print(f"{owner} {self.name!r}: added {len(rows[1])} embeddings, {self.size()} indexed.")

    def upsert(
        self,
        embeddings: Any,
        idxs: Sequence[int],
        *,
        labels: Sequence[int] | None = None,
        names: Sequence[str] | None = None,
    ) -> None:
        """Replaces the rows of the ids `idxs`, or adds those the collection does not hold.

        A replaced row takes the new embedding, label and name (absent ones
        become null): Milvus' `upsert`.

        Args:
            embeddings: `[n, dim]` embeddings.
            idxs: `n` distinct integer ids.
            labels: `n` integer labels, or `None`.
            names: `n` strings, or `None`.

        Raises:
            ValueError: If an argument is malformed or an id repeats.
            RuntimeError: If the collection was dropped, or the server failed.
        """
        self._write("upsert", *self._checked_rows(embeddings, idxs, labels, names, what="upsert"))

    def remove(self, idxs: Sequence[int]) -> None:
        """Deletes the rows of the ids `idxs` (Milvus' `delete` by primary key).

        Args:
            idxs: Distinct integer ids, each held by the collection.

        Raises:
            ValueError: If `idxs` is not a sequence of distinct integers, or
                the collection does not hold one of them; nothing is removed
                then.
            RuntimeError: If the collection was dropped, or the server failed.
        """
        ids = self._idxs(idxs, len(np.asarray(idxs).reshape(-1)))
        self._check_unique_ids(ids, "remove")
        missing = ids[~self._present(ids)]
        if len(missing):
            raise ValueError(
                f"{self._where()}: remove() got ids the collection does not hold: "
                f"{missing[:10].tolist()}{' ...' if len(missing) > 10 else ''}. Nothing was "
                "removed; pass only indexed ids."
            )
        self._remove(ids)

    def batch_lookup(
        self, embeddings: Any, k: int = 5, *, filter: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Returns the ids and distances of the `k` nearest neighbours of each query.

        Args:
            embeddings: `[n, dim]` queries.
            k: How many neighbours per query. Defaults to 5.
            filter: A Milvus boolean expression on `id`, `label` and `name`
                (`"label in [1, 2]"`), or `None` for every row. Rows that
                fail it are not candidates; fewer than `k` matches are padded
                with id -1 at distance `inf`. Rows above `max_visible_id`
                are never candidates.

        Returns:
            `(idxs, distances)`, each of shape `[n, k]` (int64 and float32),
            nearest first.

        Raises:
            ValueError: If the queries are malformed, the index is empty, or
                `k` is not in `[1, size()]`.
            RuntimeError: If the collection was dropped, or the server failed.
        """
        if filter is not None and not isinstance(filter, str):
            raise ValueError(f"{self._where()}: filter must be a string, got {filter!r}.")
        queries = self._embeddings(embeddings, what="queries")
        k = self._k(k)
        if not len(queries):
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        return self._search(queries, k, filter or "")

    def ids(self) -> np.ndarray:
        """The ids the search shows (up to `max_visible_id`), in ascending order.

        Milvus keeps no insertion order.
        """
        return self._list_ids(self._visible())

    def _list_ids(self, filter_: str) -> np.ndarray:
        iterator = self._call(
            "list the ids",
            self._client.query_iterator,
            self.collection,
            batch_size=max(self.batch_size, 1000),
            filter=filter_,
            output_fields=[ID_FIELD],
            consistency_level="Strong",
        )
        ids: list[int] = []
        try:
            while batch := self._call("list the ids", iterator.next, timed=False):
                ids.extend(row[ID_FIELD] for row in batch)
        finally:
            iterator.close()
        return np.sort(np.asarray(ids, np.int64))

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "uri": self.uri,
            "collection": self.collection,
            "index_type": self.index_type,
            "index_params": self.index_params,
            "search_params": self.search_params,
            "timeout": self.timeout,
            "batch_size": self.batch_size,
        }

    def saved_files(self) -> list[str]:
        return [FILE_NAME]

    def _add(self, embeddings: np.ndarray, idxs: np.ndarray) -> None:
        self._check_unique_ids(idxs, "batch_add")
        self._insert(embeddings, idxs, None, None)

    def _lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self._search(queries, k, "")

    def _remove(self, idxs: np.ndarray) -> None:
        self._delete_leftovers()
        for start in range(0, len(idxs), self.batch_size):
            chunk = idxs[start : start + self.batch_size].tolist()
            self._call("delete rows", self._client.delete, self.collection, ids=chunk)

    def _present(self, idxs: np.ndarray) -> np.ndarray:
        """Whether the collection holds each of `idxs`."""
        return np.isin(idxs, self._held_ids(idxs))

    def _search(self, queries: np.ndarray, k: int, filter_: str) -> tuple[np.ndarray, np.ndarray]:
        params = dict(self.search_params)
        if "ef" in params:
            params["ef"] = max(int(params["ef"]), k)
        idxs = np.full((len(queries), k), -1, np.int64)
        scores = np.full((len(queries), k), np.nan, np.float64)
        for start in range(0, len(queries), self.batch_size):
            hits = self._call(
                "search",
                self._client.search,
                self.collection,
                data=queries[start : start + self.batch_size].tolist(),
                limit=k,
                filter=self._visible(filter_),
                anns_field=VECTOR_FIELD,
                search_params={"metric_type": self.metric, "params": params},
                output_fields=[ID_FIELD],
                consistency_level="Strong",
            )
            for row, query_hits in enumerate(hits, start=start):
                for column, hit in enumerate(query_hits[:k]):
                    idxs[row, column] = hit["id"]
                    scores[row, column] = hit["distance"]
        distances = self._distances(scores)
        order = np.argsort(distances, axis=1, kind="stable")
        return (
            np.take_along_axis(idxs, order, axis=1),
            np.take_along_axis(distances, order, axis=1).astype(np.float32),
        )

    def _save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        bound = self._max_visible_id
        if bound is None:
            ids = self._list_ids("")
            bound = int(ids[-1]) if len(ids) else -1
        record = {
            "kind": type(self).__name__,
            "format_version": FORMAT_VERSION,
            "config": self.get_config(),
            "max_visible_id": bound,
        }
        _atomic.write_text(path / FILE_NAME, json.dumps(record, indent=1))

    def _load(self, path: Path) -> None:
        owner = type(self).__name__
        file = path / FILE_NAME
        if not file.is_file():
            raise FileNotFoundError(f"{owner}: no saved search in {str(path)!r} ({FILE_NAME}).")
        try:
            record = json.loads(file.read_text("utf-8"))
            kind, version, config = record["kind"], record["format_version"], record["config"]
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{owner}: {str(file)!r} is corrupt ({err}). Save again.") from err
        if kind != owner or version not in READ_VERSIONS or not isinstance(config, dict):
            raise ValueError(
                f"{owner}: {str(file)!r} holds a {kind!r} of format {version!r}, not a {owner} "
                f"of format {' or '.join(map(str, READ_VERSIONS))}. Load it with the class "
                "that saved it."
            )
        bound = record.get("max_visible_id") if version >= 2 else None
        if version >= 2 and not (is_int(bound) and bound >= -1):
            raise ValueError(
                f"{owner}: {str(file)!r} is corrupt (max_visible_id {bound!r} is not an "
                "integer >= -1). Save again."
            )
        self._check_saved_config(config, path)
        keys = ("uri", "collection", "index_type")
        if not all(isinstance(config.get(key), str) for key in keys):
            raise ValueError(f"{owner}: {str(file)!r} lacks {keys}. Save the index again.")
        client = self._connect(config["uri"], config["collection"])
        previous = (self._client, self.uri, self.collection, self.index_type)
        self._client, self.uri, self.collection = client, config["uri"], config["collection"]
        self.index_type = config["index_type"]
        bounds = (self._max_visible_id, self._leftovers_pending)
        self._max_visible_id = None if bound is None else int(bound)
        self._leftovers_pending = bound is not None
        try:
            if not self._call("check the collection", client.has_collection, self.collection):
                raise RuntimeError(
                    f"{self._where()}: the collection saved in {str(path)!r} does not exist "
                    "(dropped, or another database). Re-index into a new collection."
                )
            self._check_collection()
        except BaseException:
            self._client, self.uri, self.collection, self.index_type = previous
            self._max_visible_id, self._leftovers_pending = bounds
            raise
        self.index_params = dict(config.get("index_params") or {})
        self.search_params = dict(config.get("search_params") or {})

    # Milvus.

    def _where(self) -> str:
        return f"{type(self).__name__} (uri {self.uri!r}, collection {self.collection!r})"

    def _visible(self, filter_: str = "") -> str:
        """`filter_` and the bound `id <= max_visible_id`, the expression every read uses."""
        if self._max_visible_id is None:
            return filter_
        bound = f"{ID_FIELD} <= {self._max_visible_id}"
        return f"({filter_}) and {bound}" if filter_ else bound

    def _delete_leftovers(self) -> None:
        """Deletes the rows above the loaded bound, once, before the first write after `load`.

        They are an interrupted add's: never saved, and holding ids the
        next add gives again, which Milvus would keep twice.
        """
        if not self._leftovers_pending:
            return
        above = f"{ID_FIELD} > {self._max_visible_id}"
        rows = self._call(
            "count the rows above the saved ids",
            self._client.query,
            self.collection,
            filter=above,
            output_fields=["count(*)"],
            consistency_level="Strong",
        )
        count = int(rows[0]["count(*)"])
        if count:
            self._call(
                "delete the unsaved rows", self._client.delete, self.collection, filter=above
            )
            warnings.warn(
                f"{self._where()}: deleted {count} row{'s' * (count != 1)} with ids above "
                f"{self._max_visible_id}, the last id of the loaded save, before writing: an "
                "add made after that save and never saved wrote them (its process was killed, "
                "failed or ended first). They were never part of the save, and their ids are "
                "given again. Save after each add you want to keep.",
                UserWarning,
                stacklevel=2,
            )
        self._leftovers_pending = False

    def _connect(self, uri: str | None = None, collection: str | None = None) -> Any:
        uri = self.uri if uri is None else uri
        collection = self.collection if collection is None else collection
        where = f"{type(self).__name__} (uri {uri!r}, collection {collection!r})"
        if is_local_uri(uri):
            if not Path(uri).parent.is_dir():
                raise ValueError(
                    f"{where}: the folder of the Milvus Lite file does not exist. Create "
                    f"{str(Path(uri).parent)!r} first, or pass another path."
                )
            if importlib.util.find_spec("milvus_lite") is None:
                raise ImportError(
                    f"{where}: a local file needs Milvus Lite, which is not installed. Install "
                    "it with: pip install 'tensorflow-similarity[milvus]'."
                )
        try:
            client = self._pymilvus.MilvusClient(uri=uri, token=self.token, timeout=self.timeout)
            # The client connects lazily on some versions: one cheap request proves the server.
            client.has_collection(collection, timeout=self.timeout)
        except self._pymilvus.MilvusException as err:
            raise ConnectionError(
                f"{where}: cannot reach the Milvus server ({err.__class__.__name__}: "
                f"{getattr(err, 'message', '') or err}). Check that it runs and the URI and "
                "token are right, or pass a local file (uri='index.db') for Milvus Lite."
            ) from err
        return client

    def _call(
        self,
        what: str,
        function: Callable[..., Any],
        *args: Any,
        timed: bool = True,
        **kwargs: Any,
    ) -> Any:
        """Calls the client (with `timeout` if `timed`); failures become errors naming where."""
        if timed:
            kwargs.setdefault("timeout", self.timeout)
        try:
            return function(*args, **kwargs)
        except self._pymilvus.MilvusException as err:
            message = getattr(err, "message", "") or str(err)
            try:
                exists = self._client.has_collection(self.collection, timeout=self.timeout)
            except self._pymilvus.MilvusException:
                raise ConnectionError(
                    f"{self._where()}: lost the Milvus server while trying to {what} "
                    f"({message}). Check that it runs."
                ) from err
            if not exists:
                raise RuntimeError(
                    f"{self._where()}: the collection was dropped (by another client?) while "
                    f"this search used it; could not {what}. Create a new MilvusSearch to "
                    "recreate it, and re-index."
                ) from err
            raise RuntimeError(f"{self._where()}: could not {what}: {message}") from err

    def _open_collection(self) -> None:
        if self._call("check the collection", self._client.has_collection, self.collection):
            self._check_collection()
        else:
            self._create_collection()
            self._max_visible_id = -1

    def _create_collection(self) -> None:
        milvus = self._pymilvus
        schema = milvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field(ID_FIELD, milvus.DataType.INT64, is_primary=True)
        schema.add_field(VECTOR_FIELD, milvus.DataType.FLOAT_VECTOR, dim=self.dim)
        schema.add_field(LABEL_FIELD, milvus.DataType.INT64, nullable=True)
        schema.add_field(
            NAME_FIELD, milvus.DataType.VARCHAR, max_length=NAME_MAX_LENGTH, nullable=True
        )
        index_params = self._client.prepare_index_params()
        index_params.add_index(
            VECTOR_FIELD,
            index_type=self.index_type,
            metric_type=self.metric,
            params=self.index_params,
        )
        self._call(
            "create the collection",
            self._client.create_collection,
            self.collection,
            schema=schema,
            index_params=index_params,
            consistency_level="Strong",
        )

    def _check_collection(self) -> None:
        """Raises unless the existing collection fits this search's dim, metric and index."""
        described = self._call(
            "describe the collection", self._client.describe_collection, self.collection
        )
        fields = {field["name"]: field for field in described["fields"]}
        vector, key = fields.get(VECTOR_FIELD), fields.get(ID_FIELD)
        milvus = self._pymilvus
        if (
            vector is None
            or key is None
            or not key.get("is_primary")
            or key["type"] != milvus.DataType.INT64
            or vector["type"] != milvus.DataType.FLOAT_VECTOR
        ):
            raise ValueError(
                f"{self._where()}: the collection exists but was not made by a MilvusSearch "
                f"(fields {sorted(fields)}; wanted an int64 primary key {ID_FIELD!r} and a "
                f"float vector {VECTOR_FIELD!r}). Pass another collection name."
            )
        found = {"dim": int(vector["params"].get("dim", -1))}
        indexes = self._call("list the indexes", self._client.list_indexes, self.collection)
        if indexes:
            index = self._call(
                "describe the index", self._client.describe_index, self.collection, indexes[0]
            )
            found["metric"] = str(index.get("metric_type", "")).upper()
            found["index_type"] = str(index.get("index_type", "")).upper()
        wanted = {"dim": self.dim, "metric": self.metric, "index_type": self.index_type}
        for key_name, value in found.items():
            if value != wanted[key_name]:
                raise ValueError(
                    f"{self._where()}: the collection exists with {key_name}={value!r}, but "
                    f"this search has {key_name}={wanted[key_name]!r} (distance "
                    f"{self.distance.name!r}). Pass another collection name, create the search "
                    f"with {key_name}={value!r}, or drop the collection."
                )
        self._fields = set(fields)
        # A collection reopened after its process ended (or a server restart) is released:
        # Milvus answers no search, query or count until it is loaded again.
        self._call("load the collection", self._client.load_collection, self.collection)
        # A collection reopened after its process ended (or a server restart) is released:
        # Milvus answers no search, query or count until it is loaded again.

    def _checked_rows(
        self,
        embeddings: Any,
        idxs: Any,
        labels: Any,
        names: Any,
        *,
        what: str,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, list[str] | None]:
        embeddings = self._embeddings(embeddings, what="embeddings")
        ids = self._idxs(idxs, len(embeddings))
        self._check_unique_ids(ids, what)
        if labels is not None:
            labels = np.asarray(labels)
            if labels.shape != (len(ids),) or (
                len(ids) and not np.issubdtype(labels.dtype, np.integer)
            ):
                raise ValueError(
                    f"{self._where()}: labels must be {len(ids)} integers, one per embedding; "
                    f"got shape {list(labels.shape)} of {labels.dtype}."
                )
            labels = labels.astype(np.int64)
        if names is not None:
            names = list(names)
            bad = [n for n in names if not isinstance(n, str) or len(n) > NAME_MAX_LENGTH]
            if len(names) != len(ids) or bad:
                raise ValueError(
                    f"{self._where()}: names must be {len(ids)} strings of at most "
                    f"{NAME_MAX_LENGTH} characters, one per embedding; got {len(names)} "
                    f"names{f', such as {bad[0]!r}' if bad else ''}."
                )
        return embeddings, ids, labels, names

    def _check_unique_ids(self, ids: np.ndarray, what: str) -> None:
        unique, counts = np.unique(ids, return_counts=True)
        if (counts > 1).any():
            raise ValueError(
                f"{self._where()}: {what}() got the id {int(unique[counts > 1][0])} more "
                "than once; a collection holds one row per id. Pass distinct ids."
            )

    def _held_ids(self, ids: np.ndarray) -> np.ndarray:
        """Which of `ids` the search shows."""
        held: list[int] = []
        for start in range(0, len(ids), self.batch_size):
            chunk = ids[start : start + self.batch_size].tolist()
            rows = self._call(
                "look up ids",
                self._client.query,
                self.collection,
                filter=self._visible(f"{ID_FIELD} in {chunk}"),
                output_fields=[ID_FIELD],
                consistency_level="Strong",
            )
            held.extend(row[ID_FIELD] for row in rows)
        return np.asarray(held, np.int64)

    def _insert(
        self,
        embeddings: np.ndarray,
        ids: np.ndarray,
        labels: np.ndarray | None,
        names: list[str] | None,
    ) -> None:
        self._delete_leftovers()
        # No row is above the bound (this search raises it before each write, and the rows
        # an interrupted add left above it are gone): only the ids at or below it can be
        # held, and only those are looked up, so adding new ids sends no query.
        check = ids if self._max_visible_id is None else ids[ids <= self._max_visible_id]
        held = check[self._present(check)] if len(check) else check
        if len(held):
            raise ValueError(
                f"{self._where()}: the collection already holds the ids "
                f"{held[:10].tolist()}{' ...' if len(held) > 10 else ''}; batch_add adds new ids "
                "only. Use upsert() to replace rows, or remove() them first."
            )
        self._write("insert", embeddings, ids, labels, names)

    def _write(
        self,
        verb: str,
        embeddings: np.ndarray,
        ids: np.ndarray,
        labels: np.ndarray | None,
        names: list[str] | None,
    ) -> None:
        function = self._client.insert if verb == "insert" else self._client.upsert
        self._delete_leftovers()
        for start in range(0, len(ids), self.batch_size):
            stop = min(start + self.batch_size, len(ids))
            if self._max_visible_id is not None:
                # Raised before the request, so that rows a failed request may have
                # written are this search's to see and remove.
                self._max_visible_id = max(self._max_visible_id, int(ids[start:stop].max()))
            rows = [
                {
                    ID_FIELD: int(ids[i]),
                    VECTOR_FIELD: embeddings[i].tolist(),
                    LABEL_FIELD: None if labels is None else int(labels[i]),
                    NAME_FIELD: None if names is None else names[i],
                }
                for i in range(start, stop)
            ]
            self._call(f"{verb} rows", function, self.collection, data=rows)

    def _distances(self, scores: np.ndarray) -> np.ndarray:
        """Milvus' scores as the package's distances (`inf` where no neighbour was found)."""
        found = ~np.isnan(scores)
        scores = np.where(found, scores, 0.0)
        if self.metric == "COSINE":
            distances = np.maximum(1.0 - scores, 0.0)
        elif self.metric == "IP":
            distances = -scores
        elif isinstance(self.distance, EuclideanDistance):
            distances = np.sqrt(np.maximum(scores, 0.0))
        else:
            distances = np.maximum(scores, 0.0)
        return np.where(found, distances, np.inf)
