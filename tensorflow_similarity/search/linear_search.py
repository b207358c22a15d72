"""Exact nearest-neighbour search by brute force."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distances import (
    CosineDistance,
    Distance,
    EuclideanDistance,
    InnerProductSimilarity,
    SquaredEuclideanDistance,
)
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.search.search import Search
from tensorflow_similarity.stores.growing_array import GrowingArray
from tensorflow_similarity.stores.npz import check_finite_rows, read_npz, write_npz

FORMAT_VERSION = 1
FILE_NAME = "linear_search.npz"


@keras.saving.register_keras_serializable(package="Similarity")
class LinearSearch(Search):
    """Exact k-nearest-neighbour search: every query against every embedding.

    The default search: TensorFlow only, exact, and as fast as a matrix
    product and `tf.math.top_k` on the host. Cosine, inner product and the
    Euclidean distances cost one matrix product per query chunk: for cosine
    the embeddings are kept L2-normalised (so the index holds unit rows) and
    queries are normalised; for the Euclidean distances the squared norms
    of the embeddings are kept. Any other `Distance` (Manhattan, SNR, one of
    yours) is computed by the distance object itself, chunk by chunk.
    Queries go in chunks of at most `max_chunk_elements` distances, which
    bounds the memory a lookup takes. Each `batch_add` converts only its own
    rows (normalised, with their norms) into a tensor kept in a list; the
    first lookup after adds concatenates the list once, so adding costs the
    rows added, not the index size, and a lookup after `n` small adds pays
    one copy of the index, not `n`. Distances are those of the `Distance`
    objects (`1 - cos` for cosine, `|q - k|` for Euclidean, ...), except
    inner product, returned negated (see `Search`).

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
        self._idxs_buffer = GrowingArray((), np.int64)
        # The embeddings (unit rows for cosine) and their squared norms, as
        # tensors in the order added; _keys() merges them into one chunk.
        self._key_chunks: list[tf.Tensor] = []
        self._norm_chunks: list[tf.Tensor] = []

    def size(self) -> int:
        return len(self._idxs_buffer)

    def reset(self) -> None:
        self._idxs_buffer.clear()
        self._key_chunks, self._norm_chunks = [], []

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_chunk_elements": self.max_chunk_elements}

    def ids(self) -> np.ndarray:
        """The ids of the embeddings, in the order they were added (a read-only view)."""
        view = self._idxs_buffer.view()
        view.flags.writeable = False
        return view

    def saved_files(self) -> list[str]:
        return [FILE_NAME]

    def _add(self, embeddings: np.ndarray, idxs: np.ndarray) -> None:
        if isinstance(self.distance, CosineDistance):
            # NumPy reduces each row alone, so a row normalises to the same bits whether
            # it is added alone or in a batch (TensorFlow's kernels differ in the last bit).
            embeddings = embeddings / np.sqrt(np.maximum(_squared_norms(embeddings), 1e-12))
        self._append_keys(embeddings)
        self._idxs_buffer.extend(idxs)

    def _append_keys(self, keys: np.ndarray) -> None:
        self._key_chunks.append(tf.constant(keys, tf.float32))
        self._norm_chunks.append(tf.constant(_squared_norms(keys).T, tf.float32))

    def key_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The `[m, dim]` embeddings lookups compare with and their `[1, m]` squared norms.

        In the order of `ids()`, as float32 arrays: for cosine the rows are
        the unit rows the index keeps. `exact_nearest` on them returns what
        `batch_lookup` returns (positions into `ids()`); `serving` bakes them
        into an exported model's `lookup`.
        """
        if not self.size():
            return np.zeros((0, self.dim), np.float32), np.zeros((1, 0), np.float32)
        keys, key_norms = self._keys()
        return keys.numpy(), key_norms.numpy()

    def _keys(self) -> tuple[tf.Tensor, tf.Tensor]:
        """The `[m, dim]` embeddings and their `[1, m]` squared norms, merged into one chunk."""
        if len(self._key_chunks) > 1:
            self._key_chunks = [tf.concat(self._key_chunks, axis=0)]
            self._norm_chunks = [tf.concat(self._norm_chunks, axis=1)]
        return self._key_chunks[0], self._norm_chunks[0]

    def _lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        keys, key_norms = self._keys()
        rows = max(1, self.max_chunk_elements // self.size())
        positions, distances = [], []
        for start in range(0, len(queries), rows):
            chunk_distances, chunk_positions = exact_nearest(
                self.distance, tf.constant(queries[start : start + rows]), keys, key_norms, k
            )
            positions.append(chunk_positions.numpy())
            distances.append(chunk_distances.numpy())
        positions = np.concatenate(positions)
        return self._idxs_buffer.view()[positions], np.concatenate(distances)

    def _save(self, path: Path) -> None:
        keys = self._keys()[0].numpy() if self.size() else np.zeros((0, self.dim), np.float32)
        write_npz(
            path / FILE_NAME,
            {
                "config": np.array(json.dumps(self.get_config())),
                "embeddings": keys,
                "idxs": self._idxs_buffer.view(),
            },
            kind=type(self).__name__,
            format_version=FORMAT_VERSION,
        )

    def _load(self, path: Path) -> None:
        arrays = read_npz(
            path / FILE_NAME,
            kind=type(self).__name__,
            format_version=FORMAT_VERSION,
            keys=("config", "embeddings", "idxs"),
            owner=type(self).__name__,
        )
        self._check_saved_config(json.loads(str(arrays["config"])), path)
        embeddings, idxs = arrays["embeddings"], arrays["idxs"]
        consistent = (
            idxs.ndim == 1
            and np.issubdtype(idxs.dtype, np.integer)
            and embeddings.shape == (len(idxs), self.dim)
            and embeddings.dtype == np.float32
        )
        if not consistent:
            raise ValueError(
                f"{type(self).__name__}: {str(path / FILE_NAME)!r} is inconsistent "
                f"(embeddings {embeddings.shape} {embeddings.dtype}, idxs {idxs.shape} "
                f"{idxs.dtype}). Save the index again."
            )
        check_finite_rows(embeddings, path / FILE_NAME, owner=type(self).__name__)
        self.reset()
        if len(idxs):
            # The saved rows are already normalised for cosine; normalising again is a no-op
            # up to rounding, which a reload must not add.
            self._append_keys(embeddings)
            self._idxs_buffer.replace(idxs.astype(np.int64))


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
    """The `[n, 1]` squared L2 norms of the rows of `rows`."""
    return np.sum(np.square(rows), axis=1, keepdims=True)
