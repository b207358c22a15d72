"""Exact nearest-neighbour search by brute force."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity._growing_array import GrowingArray
from tensorflow_similarity._npz import read_npz, write_npz
from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distances import (
    CosineDistance,
    Distance,
    EuclideanDistance,
    InnerProductSimilarity,
    SquaredEuclideanDistance,
)
from tensorflow_similarity.search.search import Search

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
    bounds the memory a lookup takes. Distances are those of the `Distance`
    objects (`1 - cos` for cosine, `|q - k|` for Euclidean, ...), except
    inner product, returned negated (see `Search`).

    Args:
        distance: A `Distance` or its name. Defaults to `"cosine"`.
        dim: The size of the embeddings.
        max_chunk_elements: The most query-by-embedding distances computed at
            once. Defaults to `2**25` (128 MiB of float32).
        name: The index's name. Defaults to `"linear"`.
        verbose: Verbosity. Defaults to 0.

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
        name: str | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(distance=distance, dim=dim, name=name, verbose=verbose)
        self.max_chunk_elements = check_int(
            "max_chunk_elements", max_chunk_elements, minimum=1, owner=type(self).__name__
        )
        self._embeddings_buffer = GrowingArray((self.dim,), np.float32)
        self._idxs_buffer = GrowingArray((), np.int64)
        self._cache: tuple[tf.Tensor, tf.Tensor] | None = None

    def size(self) -> int:
        return len(self._idxs_buffer)

    def reset(self) -> None:
        self._embeddings_buffer.clear()
        self._idxs_buffer.clear()
        self._cache = None

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "max_chunk_elements": self.max_chunk_elements}

    def _add(self, embeddings: np.ndarray, idxs: np.ndarray) -> None:
        if isinstance(self.distance, CosineDistance):
            embeddings = tf.math.l2_normalize(embeddings, axis=1).numpy()
        self._embeddings_buffer.extend(embeddings)
        self._idxs_buffer.extend(idxs)
        self._cache = None

    def _keys(self) -> tuple[tf.Tensor, tf.Tensor]:
        """The embeddings as a tensor and their `[1, m]` squared norms, cached until an add."""
        if self._cache is None:
            keys = tf.constant(self._embeddings_buffer.view())
            norms = tf.reduce_sum(tf.square(keys), axis=1)[tf.newaxis, :]
            self._cache = (keys, norms)
        return self._cache

    def _lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        keys, key_norms = self._keys()
        rows = max(1, self.max_chunk_elements // self.size())
        positions, distances = [], []
        for start in range(0, len(queries), rows):
            chunk_distances, chunk_positions = self._chunk(
                tf.constant(queries[start : start + rows]), keys, key_norms, k
            )
            positions.append(chunk_positions.numpy())
            distances.append(chunk_distances.numpy())
        positions = np.concatenate(positions)
        return self._idxs_buffer.view()[positions], np.concatenate(distances)

    def _chunk(
        self, queries: tf.Tensor, keys: tf.Tensor, key_norms: tf.Tensor, k: int
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns the `[n, k]` distances and positions of one chunk of queries."""
        distance = self.distance
        if isinstance(distance, CosineDistance):
            queries = tf.math.l2_normalize(queries, axis=1)
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

    def _save(self, path: Path) -> None:
        write_npz(
            path / FILE_NAME,
            {
                "config": np.array(json.dumps(self.get_config())),
                "embeddings": self._embeddings_buffer.view(),
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
        if embeddings.shape != (len(idxs), self.dim) or embeddings.dtype != np.float32:
            raise ValueError(
                f"{type(self).__name__}: {str(path / FILE_NAME)!r} is inconsistent "
                f"(embeddings {embeddings.shape} {embeddings.dtype}, {len(idxs)} idxs). "
                "Save the index again."
            )
        self._embeddings_buffer.replace(embeddings)
        self._idxs_buffer.replace(idxs.astype(np.int64))
        self._cache = None
