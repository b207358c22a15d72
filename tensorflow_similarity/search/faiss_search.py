"""Nearest-neighbour search on faiss: exact (flat) or approximate (hnsw, ivfpq)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import keras
import numpy as np

from tensorflow_similarity import _atomic
from tensorflow_similarity._validation import check_choice, check_int
from tensorflow_similarity.distances import (
    CosineDistance,
    Distance,
    EuclideanDistance,
    InnerProductSimilarity,
    ManhattanDistance,
    SquaredEuclideanDistance,
)
from tensorflow_similarity.search.row_ids import RowIds
from tensorflow_similarity.search.search import Search
from tensorflow_similarity.stores.npz import check_finite_rows, read_npz, write_npz

# 2: the faiss index in its own file (faiss.write_index), the npz keeps the ids and the
# tombstones. 1 (the serialised index inside the npz) still loads.
FORMAT_VERSION = 2
FILE_NAME = "faiss_search.npz"
INDEX_FILE = "faiss_search.faiss"
ALGOS = ("flat", "hnsw", "ivfpq")
_SUPPORTED = (
    CosineDistance,
    InnerProductSimilarity,
    EuclideanDistance,
    SquaredEuclideanDistance,
    ManhattanDistance,
)


def faiss_distances(distance: Distance, scores: np.ndarray, found: np.ndarray) -> np.ndarray:
    """The package's float32 distances from faiss' scores; `inf` where nothing was `found`.

    Cosine and inner product are searched as inner products (of unit rows
    for cosine), Euclidean distances as squared L2, Manhattan as L1.
    """
    if isinstance(distance, CosineDistance):
        distances = np.maximum(1.0 - scores, 0.0)
    elif isinstance(distance, InnerProductSimilarity):
        distances = -scores
    elif isinstance(distance, EuclideanDistance):
        distances = np.sqrt(np.maximum(scores, 0.0))
    else:
        distances = np.maximum(scores, 0.0)
    return np.where(found, distances, np.inf).astype(np.float32)


def import_faiss(owner: str = "FaissSearch") -> ModuleType:
    """Returns the `faiss` module, or raises an ImportError naming the install."""
    try:
        return importlib.import_module("faiss")
    except ImportError as err:
        raise ImportError(
            f"{owner} needs faiss, which is not installed. Install it with: "
            "pip install 'tensorflow-similarity[faiss]' (or pip install faiss-cpu)."
        ) from err


@keras.saving.register_keras_serializable(package="Similarity")
class FaissSearch(Search):
    """k-nearest-neighbour search on a faiss index (`pip install 'tensorflow-similarity[faiss]'`).

    Three algorithms:

    - `"flat"` (the default): exact, every query against every embedding,
      faiss' own brute force.
    - `"hnsw"`: approximate, a hierarchical navigable small-world graph
      (`IndexHNSWFlat`); `hnsw_m` links per node, `ef_construction` and
      `ef_search` trade build and query time for recall. No training. The
      defaults are chosen for recall@10 >= 0.95 on the hardest data, 10^5
      isotropic Gaussian 128-d embeddings (measured in
      `benchmark/results/REPORT.md`). Trained embeddings are clustered by
      class and keep that recall at a much smaller `ef_search`, which is
      faster: lower it after measuring recall on your own embeddings. On
      unstructured data at this recall, hnsw is no faster than brute force
      on a few cores.
    - `"ivfpq"`: approximate and compressed, an inverted file of `nlist`
      cells with product-quantised codes (`m` sub-vectors of `nbits` bits;
      `dim` must be a multiple of `m`), searching `nprobe` cells. It must be
      trained: the first `batch_add` trains it on its embeddings (which must
      number at least `max(nlist, 2**nbits)`; faiss advises 39 per cell)
      unless `train(samples)` was called before. Approximate scores, so
      the reported distances are approximate too. Not for Manhattan.

    Removing (`remove`, and the replaced ids of `upsert`) marks the rows
    removed (tombstones): every lookup asks faiss for `k` plus the number
    of tombstones it still holds and leaves them out, so a removed
    embedding is never returned and flat stays exact. `compact` drops them:
    flat and ivfpq delete them in place (faiss' `remove_ids`), hnsw, whose
    graph cannot lose a node, is rebuilt from the embeddings it keeps.

    Distances are reported as `LinearSearch` reports them: for cosine the
    embeddings and queries are L2-normalised and faiss' inner product `s`
    becomes `1 - s`; faiss' squared L2 becomes the Euclidean distance by a
    square root (`"squared_euclidean"` keeps it); inner product is reported
    negated. Should an approximate index find fewer than `k` neighbours
    (ivfpq with few cells probed), the missing ones are id -1 at distance
    `inf`. SNR and custom distances are not supported (use `LinearSearch`).
    faiss uses every core (OpenMP); `faiss.omp_set_num_threads` changes that.

    Args:
        distance: A `Distance` or its name. Defaults to `"cosine"`.
        dim: The size of the embeddings.
        algo: `"flat"`, `"hnsw"` or `"ivfpq"`. Defaults to `"flat"`.
        m: ivfpq: sub-vectors per code. Defaults to 8.
        nbits: ivfpq: bits per sub-vector code. Defaults to 8.
        nlist: ivfpq: number of cells. Defaults to 1024.
        nprobe: ivfpq: cells searched per query. Defaults to 1.
        hnsw_m: hnsw: links per node (faiss' `M`). Defaults to 48.
        ef_construction: hnsw: candidate list size while building (faiss'
            `efConstruction`). Defaults to 200.
        ef_search: hnsw: candidate list size while searching (faiss'
            `efSearch`; a lookup of `k` neighbours uses `max(ef_search, k)`).
            Defaults to 512.
        verbose: Verbosity (see `Search`). Defaults to 0.
        name: The index's name. Defaults to `"faiss"`.

    Raises:
        ImportError: If faiss is not installed.
        ValueError: If the distance or an argument is not supported.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.search import FaissSearch
    >>> search = FaissSearch("l2", dim=2, algo="flat")
    >>> search.batch_add(np.array([[0.0, 0.0], [3.0, 4.0]]), idxs=[10, 11])
    >>> idxs, distances = search.lookup(np.array([3.0, 3.0]), k=2)
    >>> idxs.tolist(), [round(float(d), 4) for d in distances]
    ([11, 10], [1.0, 4.2426])
    """

    default_name = "faiss"

    def __init__(
        self,
        distance: Distance | str = "cosine",
        dim: int = 0,
        algo: str = "flat",
        m: int = 8,
        nbits: int = 8,
        nlist: int = 1024,
        nprobe: int = 1,
        hnsw_m: int = 48,
        ef_construction: int = 200,
        ef_search: int = 512,
        verbose: int = 0,
        name: str | None = None,
    ) -> None:
        super().__init__(distance=distance, dim=dim, verbose=verbose, name=name)
        owner = type(self).__name__
        self.algo = check_choice(
            "algo",
            algo,
            ALGOS,
            owner=owner,
            hint="flat is exact; hnsw and ivfpq are approximate.",
        )
        self.m = check_int("m", m, minimum=1, owner=owner)
        self.nbits = check_int("nbits", nbits, minimum=1, owner=owner)
        self.nlist = check_int("nlist", nlist, minimum=1, owner=owner)
        self.nprobe = check_int("nprobe", nprobe, minimum=1, owner=owner)
        self.hnsw_m = check_int("hnsw_m", hnsw_m, minimum=2, owner=owner)
        self.ef_construction = check_int("ef_construction", ef_construction, minimum=1, owner=owner)
        self.ef_search = check_int("ef_search", ef_search, minimum=1, owner=owner)
        if not isinstance(self.distance, _SUPPORTED):
            raise ValueError(
                f"{owner} supports the distances cosine, inner_product, euclidean, "
                f"squared_euclidean and manhattan; got {self.distance.name!r}. Use "
                "LinearSearch for it."
            )
        if self.algo == "ivfpq":
            if isinstance(self.distance, ManhattanDistance):
                raise ValueError(
                    f"{owner}: algo='ivfpq' quantises for L2 or inner product, not manhattan. "
                    "Use algo='flat' or 'hnsw'."
                )
            if self.dim % self.m:
                raise ValueError(
                    f"{owner}: algo='ivfpq' splits embeddings into m={self.m} sub-vectors, so "
                    f"dim={self.dim} must be a multiple of m. Pass an m that divides {self.dim}."
                )
        self._faiss = import_faiss(owner)
        self._row_ids = RowIds()
        # Tombstones faiss still holds (ivfpq's compact deletes them but keeps the rows).
        self._dead_in_index = 0
        self._index = self._new_index()

    # Search's verbs.

    def size(self) -> int:
        return self._row_ids.alive_count

    def reset(self) -> None:
        """Empties the index; a trained ivfpq must be trained again."""
        self._row_ids.clear()
        self._dead_in_index = 0
        self._index = self._new_index()

    def is_built(self) -> bool:
        """Whether the index is trained (always, except ivfpq before `train`)."""
        return bool(self._index.is_trained)

    def train(self, samples: Any) -> None:
        """Trains an ivfpq index on `samples` (a no-op for flat and hnsw).

        Args:
            samples: `[n, dim]` embeddings like those to be indexed, at least
                `max(nlist, 2**nbits)` of them.

        Raises:
            ValueError: If the samples are of the wrong shape or too few.
        """
        samples = self._embeddings(samples, what="training samples")
        if self.algo == "ivfpq":
            self._check_trainable(len(samples))
            self._index.train(self._prepare(samples))

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "algo": self.algo,
            "m": self.m,
            "nbits": self.nbits,
            "nlist": self.nlist,
            "nprobe": self.nprobe,
            "hnsw_m": self.hnsw_m,
            "ef_construction": self.ef_construction,
            "ef_search": self.ef_search,
        }

    def ids(self) -> np.ndarray:
        """The ids of the embeddings, in the order they were added (removed ones left out)."""
        ids = self._row_ids.alive_ids()
        ids.flags.writeable = False
        return ids

    def saved_files(self) -> list[str]:
        return [FILE_NAME, INDEX_FILE]

    def _add(self, embeddings: np.ndarray, idxs: np.ndarray) -> None:
        prepared = self._prepare(embeddings)
        if not self._index.is_trained:
            self._check_trainable(len(embeddings))
            self._index.train(prepared)
        if self.algo == "ivfpq":
            # Rows keep their number after a compact deletes others, so faiss gets it.
            rows = np.arange(len(self._row_ids), len(self._row_ids) + len(prepared))
            self._index.add_with_ids(prepared, rows.astype(np.int64))
        else:
            self._index.add(prepared)
        self._row_ids.extend(idxs)

    def _remove(self, idxs: np.ndarray) -> None:
        self._row_ids.kill(self._row_ids.rows_of(idxs))
        self._dead_in_index += len(idxs)

    def _present(self, idxs: np.ndarray) -> np.ndarray:
        return self._row_ids.rows_of(idxs) >= 0

    def _compact(self) -> None:
        if not self._dead_in_index:
            return
        alive = self._row_ids.alive()
        if self.algo == "ivfpq":
            dead_rows = np.flatnonzero(~alive).astype(np.int64)
            self._index.remove_ids(self._faiss.IDSelectorBatch(dead_rows))
            self._dead_in_index = 0
            return
        if self.algo == "flat":
            # Deletes in place, keeping the order of the rows left.
            dead_rows = np.flatnonzero(~alive).astype(np.int64)
            self._index.remove_ids(self._faiss.IDSelectorBatch(dead_rows))
        else:
            kept = np.array(self._stored_vectors(self._index)[0][alive])
            index = self._new_index()
            index.add(kept)
            self._index = index
        self._row_ids.keep(alive.copy())
        self._dead_in_index = 0

    def _lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        asked = min(k + self._dead_in_index, self._index.ntotal)
        if self.algo == "hnsw":
            self._index.hnsw.efSearch = max(self.ef_search, asked)
        scores, positions = self._index.search(self._prepare(queries), asked)
        if self._dead_in_index:
            scores, positions = self._without_tombstones(scores, positions, k)
        found = positions >= 0
        idxs = np.where(found, self._row_ids.ids()[np.where(found, positions, 0)], -1)
        distances = faiss_distances(self.distance, scores, found)
        return idxs.astype(np.int64), distances

    def _without_tombstones(
        self, scores: np.ndarray, positions: np.ndarray, k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The first `k` results of each row that are not tombstones, -1 past the found ones."""
        alive = self._row_ids.alive()
        keep = (positions >= 0) & alive[np.where(positions >= 0, positions, 0)]
        # A stable sort by "is a tombstone" moves the alive results first, in order.
        order = np.argsort(~keep, axis=1, kind="stable")[:, :k]
        kept = np.take_along_axis(keep, order, axis=1)
        scores = np.take_along_axis(scores, order, axis=1)
        positions = np.where(kept, np.take_along_axis(positions, order, axis=1), -1)
        return scores, positions

    def _save(self, path: Path) -> None:
        write_npz(
            path / FILE_NAME,
            {
                "config": np.array(json.dumps(self.get_config())),
                "idxs": self._row_ids.ids(),
                "alive": self._row_ids.alive(),
                "dead_in_index": np.int64(self._dead_in_index),
            },
            kind=type(self).__name__,
            format_version=FORMAT_VERSION,
            compression=False,
        )
        with _atomic.writing_file(path / INDEX_FILE) as partial:
            self._faiss.write_index(self._index, str(partial))

    def _load(self, path: Path) -> None:
        owner = type(self).__name__
        arrays = read_npz(
            path / FILE_NAME,
            kind=owner,
            format_version=(1, FORMAT_VERSION),
            keys=("config", "idxs"),
            optional=("index", "alive", "dead_in_index"),
            owner=owner,
        )
        config = json.loads(str(arrays["config"]))
        self._check_saved_config(config, path)
        if config.get("algo") != self.algo:
            raise ValueError(
                f"{owner}: the index saved in {str(path)!r} has algo={config.get('algo')!r} but "
                f"this index has algo={self.algo!r}. Create the index with "
                f"algo={config.get('algo')!r} to load it."
            )
        version = int(arrays["format_version"])
        file = path / (FILE_NAME if version == 1 else INDEX_FILE)
        try:
            if version == 1:
                index = self._faiss.deserialize_index(arrays["index"])
            else:
                index = self._faiss.read_index(str(file))
        except (RuntimeError, KeyError) as err:
            raise ValueError(
                f"{owner}: the faiss index in {str(file)!r} is corrupt or missing ({err}). "
                "Save the index again."
            ) from err
        idxs = arrays["idxs"]
        alive = arrays.get("alive", np.ones(len(idxs), bool))
        dead_in_index = int(arrays.get("dead_in_index", 0))
        rows_in_index = len(idxs) - (int((~alive).sum()) - dead_in_index)
        consistent = (
            idxs.ndim == 1
            and np.issubdtype(idxs.dtype, np.integer)
            and alive.shape == idxs.shape
            and alive.dtype == bool
            and index.ntotal == rows_in_index
            and index.d == self.dim
        )
        if not consistent:
            raise ValueError(
                f"{owner}: {str(path / FILE_NAME)!r} is inconsistent ({index.ntotal} embeddings "
                f"of size {index.d}, ids {idxs.shape} {idxs.dtype}). Save the index again."
            )
        for vectors in self._stored_vectors(index):
            check_finite_rows(vectors, file, owner=owner)
        self._index = index
        self._configure(index)
        self._row_ids.replace(idxs.astype(np.int64), alive)
        self._dead_in_index = dead_in_index

    # faiss.

    def _metric(self) -> int:
        if isinstance(self.distance, (CosineDistance, InnerProductSimilarity)):
            return self._faiss.METRIC_INNER_PRODUCT
        if isinstance(self.distance, ManhattanDistance):
            return self._faiss.METRIC_L1
        return self._faiss.METRIC_L2

    def _new_index(self) -> Any:
        faiss, metric = self._faiss, self._metric()
        if self.algo == "flat":
            index = faiss.IndexFlat(self.dim, metric)
        elif self.algo == "hnsw":
            index = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, metric)
            index.hnsw.efConstruction = self.ef_construction
        else:
            index = faiss.index_factory(
                self.dim, f"IVF{self.nlist},PQ{self.m}x{self.nbits}", metric
            )
        self._configure(index)
        return index

    def _stored_vectors(self, index: Any) -> list[np.ndarray]:
        """What a faiss index computes distances from: its embeddings (flat, hnsw) or centroids.

        The embeddings are a view of faiss' own buffer, not a copy. ivfpq
        keeps only codes, which cannot be NaN; its coarse centroids and its
        product quantiser's codebook are what decoding them reads.
        """
        if self.algo != "ivfpq":
            flat = index if self.algo == "flat" else self._faiss.downcast_index(index.storage)
            rows = self._faiss.rev_swig_ptr(flat.get_xb(), flat.ntotal * flat.d)
            return [rows.reshape(flat.ntotal, flat.d)]
        ivf = self._faiss.downcast_index(self._faiss.extract_index_ivf(index))
        return [
            ivf.quantizer.reconstruct_n(0, ivf.quantizer.ntotal),
            self._faiss.vector_to_array(ivf.pq.centroids).reshape(-1, ivf.pq.dsub),
        ]

    def _configure(self, index: Any) -> None:
        """Applies the query-time settings, which faiss does not always serialise."""
        if self.algo == "hnsw":
            index.hnsw.efSearch = self.ef_search
        elif self.algo == "ivfpq":
            self._faiss.extract_index_ivf(index).nprobe = self.nprobe

    def _prepare(self, embeddings: np.ndarray) -> np.ndarray:
        """A float32 C-contiguous copy, L2-normalised for cosine."""
        prepared = np.array(embeddings, dtype=np.float32, order="C")
        if isinstance(self.distance, CosineDistance):
            self._faiss.normalize_L2(prepared)
        return prepared

    def _check_trainable(self, count: int) -> None:
        needed = max(self.nlist, 2**self.nbits)
        if count < needed:
            raise ValueError(
                f"{type(self).__name__}: algo='ivfpq' trains on its first batch_add (or on "
                f"train(samples)), which needs at least max(nlist, 2**nbits) = {needed} "
                f"embeddings; got {count}. Call train() with more samples first, or lower "
                "nlist and nbits."
            )
