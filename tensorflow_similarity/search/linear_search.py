"""Exact nearest-neighbour search by brute force."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity import _atomic
from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distances import (
    CosineDistance,
    Distance,
    EuclideanDistance,
    InnerProductSimilarity,
    SquaredEuclideanDistance,
)
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.search.row_ids import RowIds
from tensorflow_similarity.search.search import Search
from tensorflow_similarity.stores.growing_array import GrowingArray
from tensorflow_similarity.stores.npz import (
    check_finite_rows,
    memory_mapped_rows,
    read_npz,
    write_npz,
)

# 2: the embeddings are raw rows in their own .npy (none when shared with a store), the
# npz keeps the ids, the tombstones and the squared norms. 1 (an npz with the unit rows
# for cosine) still loads.
FORMAT_VERSION = 2
FILE_NAME = "linear_search.npz"
ROWS_FILE = "linear_search_embeddings.npy"
# A lookup's block of scores, at most `max_chunk_elements`: up to QUERY_BLOCK queries
# (each row is read once per query block) by as many rows as make BLOCK_ELEMENTS scores
# (32 MiB of float32; 8,192 rows for 1,024 queries). Fewer, larger blocks cost fewer
# calls into the multi-threaded BLAS, whose threads wait for busy cores on every call.
QUERY_BLOCK = 1024
BLOCK_ELEMENTS = 2**23
# Sorting a block's candidates costs about this many times a top-k over the block,
# per entry: beyond, `_merged_best` takes the block's top-k first.
CANDIDATE_COST = 8


@keras.saving.register_keras_serializable(package="Similarity")
class LinearSearch(Search):
    """Exact k-nearest-neighbour search: every query against every embedding.

    The default search: exact, on NumPy: a matrix product per block of
    queries and embeddings, whose best scores are merged into each query's
    best so far. It keeps the embeddings as given (raw rows, one
    float32 array) and their squared norms; cosine divides each product by
    the row's norm, the Euclidean distances rank by `2 q.k - |k|^2` and
    measure the `k` found again from differences. Any other `Distance`
    (Manhattan, SNR, one of yours) is computed by the distance object
    itself, block by block. A block holds at most `max_chunk_elements`
    distances (up to 1,024 queries by 8,192 embeddings), which bounds the
    memory a lookup takes; each embedding is read once per block of queries.
    The neighbours found do not depend on the blocks: nearest first, ties
    in the order the embeddings were added. Distances are those of the
    `Distance` objects (`1 - cos` for cosine, `|q - k|` for Euclidean, ...),
    except inner product, returned negated (see `Search`).

    `remove` marks rows removed (tombstones, masked out of every lookup:
    lookups stay exact); `compact` drops them. `share_rows` makes the
    search read the embeddings of a store instead of keeping its own, so
    an `Indexer` holds them once: then `save` writes only the ids, and the
    store saves the rows.

    Args:
        distance: A `Distance` or its name. Defaults to `"cosine"`.
        dim: The size of the embeddings.
        max_chunk_elements: The most query-by-embedding distances computed at
            once. Defaults to `2**25` (128 MiB of float32).
        verbose: Verbosity (see `Search`). Defaults to 0.
        name: The index's name. Defaults to `"linear"`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.search import LinearSearch
    >>> search = LinearSearch("l2", dim=2)
    >>> search.batch_add(np.array([[0.0, 0.0], [3.0, 4.0]]), idxs=[10, 11])
    >>> idxs, distances = search.lookup(np.array([3.0, 3.0]), k=2)
    >>> idxs.tolist(), distances.tolist()
    ([11, 10], [1.0, 4.242640495300293])
    """

    default_name = "linear"

    def __init__(
        self,
        distance: Distance | str = "cosine",
        dim: int = 0,
        max_chunk_elements: int = 2**25,
        verbose: int = 0,
        name: str | None = None,
    ) -> None:
        super().__init__(distance=distance, dim=dim, verbose=verbose, name=name)
        self.max_chunk_elements = check_int(
            "max_chunk_elements", max_chunk_elements, minimum=1, owner=type(self).__name__
        )
        self._row_ids = RowIds()
        self._squared_norms = GrowingArray((), np.float32)
        self._own_rows: GrowingArray | None = GrowingArray((self.dim,), np.float32)
        self._shared_rows: Callable[[], np.ndarray] | None = None

    def size(self) -> int:
        return self._row_ids.alive_count

    def reset(self) -> None:
        self._row_ids.clear()
        self._squared_norms.clear()
        if self._own_rows is not None:
            self._own_rows.clear()

    def share_rows(self, rows: Callable[[], np.ndarray] | None) -> None:
        """Reads the embeddings from `rows()` instead of keeping a copy (`None`: keeps one).

        `rows()` returns the `[m, dim]` float32 rows of their owner (a
        store), of which the search's row `i` is row `i`: every `batch_add`
        and `upsert` must come after the owner appended the same rows, and
        `compact` at the same time as the owner drops the removed ones.
        `Indexer` does so with its store.

        Args:
            rows: Returns the owner's current rows (a view).

        Raises:
            ValueError: If the search already holds embeddings.
        """
        if len(self._row_ids):
            raise ValueError(
                f"{type(self).__name__}: share_rows needs an empty search; reset() it first."
            )
        if rows is None:
            self._own_rows = GrowingArray((self.dim,), np.float32)
        else:
            self._own_rows = None
        self._shared_rows = rows

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_chunk_elements": self.max_chunk_elements}

    def ids(self) -> np.ndarray:
        """The ids of the embeddings, in the order they were added (removed ones left out)."""
        ids = self._row_ids.alive_ids()
        ids.flags.writeable = False
        return ids

    def saved_files(self) -> list[str]:
        return [FILE_NAME] if self._shared_rows is not None else [FILE_NAME, ROWS_FILE]

    def _rows(self) -> np.ndarray:
        if self._shared_rows is None:
            return self._own_rows.view()
        return self._shared_rows()[: len(self._row_ids)]

    def _add(self, embeddings: np.ndarray, idxs: np.ndarray) -> None:
        if self._shared_rows is None:
            self._own_rows.extend(embeddings)
        elif len(self._shared_rows()) < len(self._row_ids) + len(embeddings):
            raise ValueError(
                f"{type(self).__name__}: its rows are shared with a store that holds "
                f"{len(self._shared_rows())} rows; add the embeddings to the store first."
            )
        self._norms()
        self._squared_norms.extend(_squared_norms(embeddings))
        self._row_ids.extend(idxs)

    def _remove(self, idxs: np.ndarray) -> None:
        self._row_ids.kill(self._row_ids.rows_of(idxs))

    def _present(self, idxs: np.ndarray) -> np.ndarray:
        return self._row_ids.rows_of(idxs) >= 0

    def _compact(self) -> None:
        keep = self._row_ids.alive().copy()
        if self._own_rows is not None:
            self._own_rows.replace(self._own_rows.view()[keep])
        self._squared_norms.replace(self._norms()[keep])
        self._row_ids.keep(keep)

    def key_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The `[m, dim]` embeddings lookups compare with and their `[1, m]` squared norms.

        Of the rows not removed, in the order of `ids()`, as float32 arrays
        (a copy): for cosine, the rows divided by their norms. `exact_nearest`
        on them returns what `batch_lookup` returns (positions into `ids()`),
        up to the rounding of that division; `serving` bakes them into an
        exported model's `lookup`.
        """
        if not self.size():
            return np.zeros((0, self.dim), np.float32), np.zeros((1, 0), np.float32)
        alive = self._row_ids.alive()
        keys = np.array(self._rows()[alive], np.float32)
        if isinstance(self.distance, CosineDistance):
            keys /= np.sqrt(np.maximum(self._norms()[alive], 1e-12))[:, None]
        return keys, _squared_norms(keys)[np.newaxis]

    def _norms(self) -> np.ndarray:
        """The rows' squared norms, computed for rows loaded without them."""
        if len(self._squared_norms) < len(self._row_ids):
            self._squared_norms.replace(_squared_norms(self._rows()))
        return self._squared_norms.view()

    def _lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        rows, norms = self._rows(), self._norms()
        dead = ~self._row_ids.alive() if self._row_ids.dead else None
        query_block, row_block = _block_shape(len(queries), len(rows), self.max_chunk_elements)
        positions, distances = [], []
        for start in range(0, len(queries), query_block):
            block_positions, block_distances = _nearest_rows(
                self.distance, queries[start : start + query_block], rows, norms, dead, k, row_block
            )
            positions.append(block_positions)
            distances.append(block_distances)
        positions = np.concatenate(positions)
        return self._row_ids.ids()[positions], np.concatenate(distances)

    def _save(self, path: Path) -> None:
        shared = self._shared_rows is not None
        write_npz(
            path / FILE_NAME,
            {
                "config": np.array(json.dumps(self.get_config())),
                "idxs": self._row_ids.ids(),
                "alive": self._row_ids.alive(),
                "squared_norms": self._norms(),
                "shared_rows": np.array(shared),
            },
            kind=type(self).__name__,
            format_version=FORMAT_VERSION,
            compression=False,
        )
        if not shared:
            with _atomic.writing_file(path / ROWS_FILE) as partial, open(partial, "wb") as out:
                np.save(out, self._own_rows.view(), allow_pickle=False)

    def _load(self, path: Path) -> None:
        owner = type(self).__name__
        file = path / FILE_NAME
        arrays = read_npz(
            file,
            kind=owner,
            format_version=(1, FORMAT_VERSION),
            keys=("config", "idxs"),
            optional=("embeddings", "alive", "squared_norms", "shared_rows"),
            owner=owner,
        )
        self._check_saved_config(json.loads(str(arrays["config"])), path)
        idxs = arrays["idxs"]
        if int(arrays["format_version"]) == 1:
            # Version 1 kept unit rows for cosine (raw ones otherwise) beside the store's.
            saved_rows = arrays.get("embeddings")
            alive, norms, shared = np.ones(len(idxs), bool), None, False
        else:
            saved_rows, alive = None, arrays.get("alive")
            norms, shared = arrays.get("squared_norms"), bool(arrays.get("shared_rows", False))
            if not shared:
                saved_rows = memory_mapped_rows(path / ROWS_FILE, owner, "Save the index again.")
        if self._shared_rows is None and shared:
            raise ValueError(
                f"{owner}: the search saved in {str(path)!r} reads its embeddings from its "
                "index's store; load it with Indexer.load (or the model's load_index)."
            )
        # Shared rows are the store's, loaded and checked by the index after the search.
        rows = None if self._shared_rows is not None else saved_rows
        consistent = (
            idxs.ndim == 1
            and np.issubdtype(idxs.dtype, np.integer)
            and (self._shared_rows is not None or rows is not None)
            and (rows is None or (rows.shape == (len(idxs), self.dim) and rows.dtype == np.float32))
            and (alive is None or (alive.shape == idxs.shape and alive.dtype == bool))
            and (norms is None or norms.shape == idxs.shape)
        )
        if not consistent:
            found = "no embeddings" if rows is None else f"embeddings {rows.shape} {rows.dtype}"
            raise ValueError(
                f"{owner}: {str(file)!r} is inconsistent ({found}, idxs {idxs.shape} "
                f"{idxs.dtype}). Save the index again."
            )
        if rows is not None:
            rows_file = path / (FILE_NAME if int(arrays["format_version"]) == 1 else ROWS_FILE)
            check_finite_rows(rows, rows_file, owner=owner)
        self.reset()
        if self._own_rows is not None:
            self._own_rows.replace(rows)
        if norms is not None:
            self._squared_norms.replace(norms)
        elif rows is not None:
            self._squared_norms.replace(_squared_norms(rows))
        # Otherwise (version 1, shared rows) the norms are computed from the rows at the
        # first lookup, once the store holds them.
        self._row_ids.replace(
            idxs.astype(np.int64), np.ones(len(idxs), bool) if alive is None else alive
        )


def _block_shape(queries: int, rows: int, max_elements: int) -> tuple[int, int]:
    """How many queries and rows a block holds: at most `max_elements` scores.

    Up to `QUERY_BLOCK` queries (as many as fit, so that each row is read once
    per query block) by as many rows as make `BLOCK_ELEMENTS` scores.
    """
    query_block = max(1, min(queries, QUERY_BLOCK, max_elements))
    return query_block, max(1, min(rows, min(max_elements, BLOCK_ELEMENTS) // query_block))


def _nearest_rows(
    distance: Distance,
    queries: np.ndarray,
    rows: np.ndarray,
    squared_norms: np.ndarray,
    dead: np.ndarray | None,
    k: int,
    row_block: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The positions in `rows` and distances of each query's `k` nearest alive rows.

    Nearest first; ties in the order of `rows`. `dead` marks removed rows.
    The rows go `row_block` at a time, each block's best merged into the
    best so far.
    """
    rows = np.asarray(rows)
    if isinstance(distance, CosineDistance):
        queries = queries / np.sqrt(np.maximum(_squared_norms(queries), 1e-12))[:, None]
        row_norms = np.sqrt(np.maximum(squared_norms, 1e-12))

        def scores_of(start: int, stop: int) -> np.ndarray:
            scores = queries @ rows[start:stop].T
            scores /= row_norms[start:stop]
            return scores

    elif isinstance(distance, InnerProductSimilarity):

        def scores_of(start: int, stop: int) -> np.ndarray:
            return queries @ rows[start:stop].T

    elif isinstance(distance, (EuclideanDistance, SquaredEuclideanDistance)):
        # |q|^2 is the same for a whole row, so the ranking needs only 2 q.k - |k|^2.
        def scores_of(start: int, stop: int) -> np.ndarray:
            return 2.0 * (queries @ rows[start:stop].T) - squared_norms[start:stop]

    else:
        tf_queries = tf.constant(queries)

        def scores_of(start: int, stop: int) -> np.ndarray:
            return -np.asarray(distance(tf_queries, tf.constant(rows[start:stop])))

    best = np.zeros((len(queries), 0), np.float32)
    positions = np.zeros((len(queries), 0), np.int64)
    for start in range(0, len(rows), row_block):
        stop = min(start + row_block, len(rows))
        scores = scores_of(start, stop)
        if dead is not None:
            scores[:, dead[start:stop]] = -np.inf
        best, positions = _merged_best(best, positions, scores, start, k)
    if isinstance(distance, CosineDistance):
        return positions, np.maximum(1.0 - best, 0.0).astype(np.float32)
    if isinstance(distance, InnerProductSimilarity):
        return positions, (-best).astype(np.float32)
    if isinstance(distance, (EuclideanDistance, SquaredEuclideanDistance)):
        # The expansion loses about sqrt(eps) * |q| near zero: the k found are measured
        # again from differences.
        differences = queries[:, np.newaxis, :] - rows[positions]
        squared = np.sum(np.square(differences), axis=2)
        order = np.argsort(squared, axis=1, kind="stable")
        squared = np.take_along_axis(squared, order, axis=1)
        positions = np.take_along_axis(positions, order, axis=1)
        if isinstance(distance, SquaredEuclideanDistance):
            return positions, squared.astype(np.float32)
        return positions, np.sqrt(squared).astype(np.float32)
    return positions, (-best).astype(np.float32)


def _merged_best(
    best: np.ndarray, positions: np.ndarray, scores: np.ndarray, start: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The `k` largest of `best` and of a block of `scores`, and their positions.

    `best` (largest first, ties by position) and `positions` are the best
    scores so far, of rows before the block; `scores` are the next rows',
    from row `start`. Ties are kept in the order of the rows, as one stable
    top-k over all of them would. Once `best` holds `k`, only the block's
    scores above each query's `k`-th best can enter (an equal one comes
    later, so loses the tie): when they are few, only they are merged.
    """
    width = scores.shape[1]
    if best.shape[1] == k:
        better = scores > best[:, -1:]
        entries = np.count_nonzero(better)
        if not entries:
            return best, positions
        if CANDIDATE_COST * entries < scores.size:
            # Flat indices (np.nonzero of a 2-d mask is several times slower), query
            # by query, each query's in the order of its rows.
            flat = np.flatnonzero(better)
            query, column = np.divmod(flat, width)
            hit, first, count = np.unique(query, return_index=True, return_counts=True)
            if CANDIDATE_COST * len(hit) * (k + int(count.max())) <= scores.size:
                line = np.repeat(np.arange(len(hit)), count)
                slot = k + np.arange(len(query)) - np.repeat(first, count)
                # The padding (-inf) sorts after every entry, the k best so far first.
                candidates = np.full((len(hit), k + int(count.max())), -np.inf, best.dtype)
                candidate_positions = np.zeros(candidates.shape, np.int64)
                candidates[:, :k], candidate_positions[:, :k] = best[hit], positions[hit]
                candidates[line, slot] = scores.reshape(-1)[flat]
                candidate_positions[line, slot] = column + start
                best, positions = best.copy(), positions.copy()
                best[hit], positions[hit] = _stable_top_k(candidates, candidate_positions, k)
                return best, positions
    # The first rows, or many that beat the best so far (rows added in an order that
    # nears the queries): the block's own top k first is cheaper than sorting them all.
    block_best, order = _top_k(scores, min(k, width))
    return _stable_top_k(
        np.concatenate([best, block_best], axis=1),
        np.concatenate([positions, order + start], axis=1),
        k,
    )


def _stable_top_k(
    scores: np.ndarray, positions: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The `k` largest `scores` of each row and their `positions`, ties in column order."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(positions, order, axis=1)


def _top_k(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's `k` largest scores and their positions, largest first, ties by position.

    `tf.math.top_k`: stable, and on every core, where NumPy's partition
    takes one.
    """
    values, positions = tf.math.top_k(scores, k)
    return values.numpy(), positions.numpy().astype(np.int64)


def exact_nearest(
    distance: Distance, queries: tf.Tensor, keys: tf.Tensor, key_norms: tf.Tensor, k: int
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns the `[n, k]` distances and positions in `keys` of each query's `k` nearest keys.

    The search of `LinearSearch` (and of an exported model's `lookup`, which
    traces it into a graph): TensorFlow ops only, nearest first, ties kept in
    the order of `keys` (`tf.math.top_k` is stable). `keys` are the index's
    rows as `LinearSearch.key_arrays` returns them (unit rows for cosine),
    `key_norms` their `[1, m]` squared norms, `1 <= k <= m`.

    Args:
        distance: The index's `Distance`.
        queries: `[n, dim]` float32 queries (raw: cosine normalises them).
        keys: `[m, dim]` float32 keys.
        key_norms: `[1, m]` float32 squared norms of `keys`.
        k: Neighbours per query.

    Returns:
        `(distances, positions)`: float32 and int32, `[n, k]`; inner product
        is a similarity, returned negated (see `Search`).
    """
    if isinstance(distance, CosineDistance):
        queries = l2_normalize(queries, axis=1)
        similarities, positions = tf.math.top_k(tf.matmul(queries, keys, transpose_b=True), k)
        return tf.maximum(1.0 - similarities, 0.0), positions
    if isinstance(distance, InnerProductSimilarity):
        similarities, positions = tf.math.top_k(tf.matmul(queries, keys, transpose_b=True), k)
        return -similarities, positions
    if isinstance(distance, (EuclideanDistance, SquaredEuclideanDistance)):
        # |q|^2 is the same for a whole row, so the ranking needs only 2 q.k - |k|^2.
        scores = 2.0 * tf.matmul(queries, keys, transpose_b=True) - key_norms
        _, positions = tf.math.top_k(scores, k)
        # The expansion loses about sqrt(eps) * |q| near zero (a row's distance to
        # itself came out 1e-3): the k found are measured again from differences.
        differences = queries[:, tf.newaxis, :] - tf.gather(keys, positions)
        squared = tf.reduce_sum(tf.square(differences), axis=2)
        order = tf.argsort(squared, axis=1, stable=True)
        squared = tf.gather(squared, order, batch_dims=1)
        positions = tf.gather(positions, order, batch_dims=1)
        if isinstance(distance, SquaredEuclideanDistance):
            return squared, positions
        return tf.sqrt(squared), positions
    negated, positions = tf.math.top_k(-distance(queries, keys), k)
    return -negated, positions


def _squared_norms(rows: np.ndarray) -> np.ndarray:
    """The `[n]` squared L2 norms of the rows of `rows`, float32."""
    return np.sum(np.square(rows, dtype=np.float32), axis=1)
