"""Approximate nearest-neighbour search whose inverted lists live on disk (faiss IVF-Flat)."""

from __future__ import annotations

import ctypes
import json
import shutil
import sys
import tempfile
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tensorflow_similarity import _atomic
from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distances import (
    CosineDistance,
    Distance,
    EuclideanDistance,
    InnerProductSimilarity,
    SquaredEuclideanDistance,
)
from tensorflow_similarity.search.faiss_search import faiss_distances, import_faiss
from tensorflow_similarity.search.search import Search
from tensorflow_similarity.stores.npz import read_npz, write_npz

FORMAT_VERSION = 1
META_FILE = "faiss_ondisk.npz"
IDS_FILE = "faiss_ondisk.ids"
INDEX_FILE = "faiss_ondisk.faiss"
# faiss records this name in INDEX_FILE and finds it beside it (IO_FLAG_ONDISK_SAME_DIR).
LISTS_FILE = "faiss_ondisk.ivfdata"
# The id of a removed row in IDS_FILE: ids are checked never to be this value.
REMOVED_ID = np.iinfo(np.int64).min
# The default `page_budget`: the pages of the lists' file mapping are released each time
# resident memory grew by this much, which bounds it whatever the index size. Lookups go as
# many queries at a time as touch about half of it (faiss parallelises over the queries of
# one call), so a small budget costs speed.
PAGE_BUDGET = 256 << 20
ADD_CHUNK = 65_536
FIRST_QUERY_CHUNK = 1
MAX_QUERY_CHUNK = 256
ID_CHUNK = 1 << 20
_PAGE = 4096
# Reached recall@10 >= 0.95 on 10^6 clustered 128-d embeddings, nlist=4096 (index_scale).
DEFAULT_NPROBE = 16
_SUPPORTED = (CosineDistance, InnerProductSimilarity, EuclideanDistance, SquaredEuclideanDistance)
_MADV_DONTNEED = 4


def _release_pages(invlists: Any) -> None:
    """Drops the pages of the lists' file mapping from this process (they stay in the page cache).

    faiss maps the whole lists file shared; every page it reads or writes stays counted in
    the process's resident memory until unmapped. For a shared file mapping MADV_DONTNEED
    only unmaps: dirty pages are kept and written back by the kernel.
    """
    if invlists is None or invlists.ptr is None or not invlists.totsize:
        return
    if sys.platform.startswith(("linux", "darwin")):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise(int(invlists.ptr), int(invlists.totsize), _MADV_DONTNEED)


def _resident_bytes() -> int | None:
    """This process's resident memory (Linux), or `None` where it cannot be read cheaply."""
    try:
        with open("/proc/self/statm", "rb") as file:
            return int(file.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class _PageBudget:
    """Releases the lists' mapped pages once resident memory grew by `limit` bytes.

    Measured rather than estimated: the kernel maps pages of the file around each one
    touched (fault-around, large folios), several times what faiss reads. Where resident
    memory cannot be read, every check releases.
    """

    def __init__(self, lists: Any, limit: int) -> None:
        self.lists = lists
        self.limit = limit
        self.base = _resident_bytes()

    def grown(self) -> int | None:
        now = _resident_bytes()
        return None if now is None or self.base is None else now - self.base

    def check(self, force: bool = False) -> int | None:
        """Releases if over budget (or `force`); returns the growth seen before, if known."""
        grown = self.grown()
        if force or grown is None or grown > self.limit:
            _release_pages(self.lists)
            self.base = _resident_bytes()
        return grown


@keras.saving.register_keras_serializable(package="Similarity")
class FaissOnDiskSearch(Search):
    """Approximate k-nearest-neighbour search on disk: faiss IVF-Flat, inverted lists in a file.

    For indexes larger than memory. The embeddings are kept whole (float32,
    no compression) in `nlist` inverted lists, one per cell of a coarse
    k-means quantizer, in one file (`faiss.OnDiskInvertedLists`) that faiss
    maps into memory; a lookup compares each query with the embeddings of
    its `nprobe` nearest cells only. Adding and looking up go in steps, and
    once the pages of the file that faiss touched reach `page_budget` bytes
    they are released from the process (the kernel keeps them in its page
    cache): resident memory stays bounded by the budget, the quantizer
    (`nlist * dim` floats) and the tombstones, whatever the number of
    embeddings. The ids are kept in a file of their own beside the lists.

    Training: the first `train_size` embeddings added are held in memory
    (and looked up exactly, by brute force, meanwhile); when there are
    `train_size` of them the quantizer is trained on them (faiss k-means)
    and they go into the lists; later embeddings go straight to the lists.
    `train(samples)` trains on other samples first. Pick `nlist` near
    `4 * sqrt(n)` for the expected number `n` of embeddings, and samples
    like the embeddings to come (the first ones of a stream sorted by class
    would train a poor quantizer).

    `nprobe` trades speed for recall: with `nprobe == nlist` every list is
    searched and lookups are exact. The default, 16, reached recall@10
    >= 0.95 on clustered 128-d embeddings with `nlist=4096` at 10^6
    embeddings (`benchmark/results/index_scale.json`), but not with
    `nlist=8192` at 10^7, which needed 32
    (`benchmark/results/index_scale_10m.json`): more cells need more
    probes. Isotropic Gaussian embeddings, which have no clusters, need far
    more. Measure recall on your own embeddings (`benchmark/index_scale.py`
    does) before settling on it.

    Removing (`remove`, and the replaced ids of `upsert`) marks the rows
    removed at once in the ids file and keeps them as tombstones, which
    every lookup leaves out (a faiss `IDSelector`), so a removed embedding
    is never returned. `compact` deletes them from the lists, reading the
    ids of every list once, and drops the tombstones.
    Checking which ids are present (`remove`, `upsert`, `ids`) reads the
    ids file, 8 bytes per embedding.

    The lists file grows by doublings, and each list keeps room to grow (a
    power of two): the file is up to about four times the embeddings' size
    (a saved copy is that size on disk; the working file is sparse). faiss
    prints a line each time the file is resized. Releasing the pages costs
    speed: a lookup sends faiss as many queries at a time as touch about
    half the budget, so a smaller `page_budget` means fewer queries per
    call (see the benchmark for queries per second against faiss used
    directly).

    Distances are reported as `LinearSearch` reports them: cosine is
    `1 - q.k` on L2-normalised embeddings, inner product is negated,
    Euclidean is the square root of faiss' squared L2. Should fewer than
    `k` neighbours be found in the probed lists, the missing ones are id -1
    at distance `inf`. Manhattan, SNR and custom distances are not
    supported.

    Files: the index works in `directory` (a new temporary folder, removed
    with the index, if `None`). `save(path)` writes the quantizer, the ids
    and a copy of the lists into `path`; `load(path)` maps the saved lists
    read-only, without reading them, and copies them into `directory` only
    when the index is next changed, so the saved folder is never modified.
    Saving into `directory` itself writes no copy; a search created on a
    folder that holds a saved index keeps it until `load(directory)` opens
    it in place or, not loaded, the first change replaces it, with a
    warning. Opened in place, changes write into the saved files at once:
    a crash before the next `save` leaves a folder that refuses to load.
    Save into another folder (a copy) where the previous state must
    survive a crash.

    Args:
        distance: A `Distance` or its name: cosine, inner_product, euclidean
            or squared_euclidean. Defaults to `"cosine"`.
        dim: The size of the embeddings.
        nlist: Number of cells (inverted lists). Defaults to 1024.
        nprobe: Cells searched per query, in `[1, nlist]`. Defaults to 16, or
            `nlist` if smaller.
        train_size: How many of the first embeddings added train the
            quantizer; at least `nlist` (faiss advises 39 per cell).
            Defaults to `40 * nlist`.
        directory: The folder the index's files are kept in while it is
            used, one per index. Defaults to a new temporary folder.
        verbose: Verbosity (see `Search`). Defaults to 0.
        name: The index's name. Defaults to `"faiss_ondisk"`.
        page_budget: Bytes of the lists' file that adding and looking up
            may keep mapped in memory before releasing them (at least
            1 MiB). Defaults to 256 MiB.

    Raises:
        ImportError: If faiss is not installed.
        ValueError: If the distance or an argument is not supported.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.search import FaissOnDiskSearch
    >>> search = FaissOnDiskSearch("l2", dim=2, nlist=2, nprobe=2, train_size=4)
    >>> points = np.array([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0], [5.0, 6.0]])
    >>> search.batch_add(points, idxs=[10, 11, 12, 13])
    >>> idxs, distances = search.lookup(np.array([5.0, 4.0]), k=2)
    >>> idxs.tolist(), [round(float(d), 4) for d in distances]
    ([12, 13], [1.0, 2.0])
    """

    default_name = "faiss_ondisk"

    def __init__(
        self,
        distance: Distance | str = "cosine",
        dim: int = 0,
        nlist: int = 1024,
        nprobe: int | None = None,
        train_size: int | None = None,
        directory: Path | str | None = None,
        verbose: int = 0,
        name: str | None = None,
        page_budget: int = PAGE_BUDGET,
    ) -> None:
        super().__init__(distance=distance, dim=dim, verbose=verbose, name=name)
        owner = type(self).__name__
        if not isinstance(self.distance, _SUPPORTED):
            raise ValueError(
                f"{owner} supports the distances cosine, inner_product, euclidean and "
                f"squared_euclidean; got {self.distance.name!r}. Use LinearSearch or "
                "FaissSearch for it."
            )
        self.nlist = check_int("nlist", nlist, minimum=1, owner=owner)
        self.nprobe = check_int(
            "nprobe",
            min(DEFAULT_NPROBE, self.nlist) if nprobe is None else nprobe,
            minimum=1,
            owner=owner,
        )
        if self.nprobe > self.nlist:
            raise ValueError(
                f"{owner}: nprobe={self.nprobe} is more than the nlist={self.nlist} cells. "
                f"Pass nprobe <= {self.nlist} (nprobe == nlist searches every cell, exactly)."
            )
        self.train_size = check_int(
            "train_size",
            40 * self.nlist if train_size is None else train_size,
            minimum=self.nlist,
            owner=owner,
            hint="k-means needs at least one sample per cell (nlist); faiss advises 39.",
        )
        self.page_budget = check_int(
            "page_budget",
            page_budget,
            minimum=1 << 20,
            owner=owner,
            hint="it is in bytes: at least one MiB (1 << 20).",
        )
        self._faiss = import_faiss(owner)
        if directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="tfsim_faiss_ondisk_"))
            weakref.finalize(self, shutil.rmtree, self.directory, ignore_errors=True)
        else:
            self.directory = Path(directory)
            self.directory.mkdir(parents=True, exist_ok=True)
        # An index saved into `directory` stays until this one changes: `load(directory)`
        # opens it in place.
        saved_here = (self.directory / META_FILE).exists()
        self._clear(keep_files=saved_here)
        self._unloaded_save = saved_here

    def _clear(self, keep_files: bool = False) -> None:
        if not keep_files:
            for file in (IDS_FILE, LISTS_FILE, INDEX_FILE):
                (self.directory / file).unlink(missing_ok=True)
            (self.directory / IDS_FILE).touch()
        self._index: Any = None
        # A loaded index maps its lists read-only until the first change.
        self._index_read_only = False
        self._unloaded_save = False
        # Where the lists and ids are read from: `directory`, or a loaded folder not to modify.
        self._source = self.directory
        self._rows = 0
        self._alive_count = 0
        # Before training: the embeddings and their rows, held in memory.
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_count = 0
        # Rows removed but still in the lists (tombstones), sorted.
        self._tombstones = np.zeros(0, np.int64)

    # Search's verbs.

    def size(self) -> int:
        return self._alive_count

    def reset(self) -> None:
        """Empties the index; it is trained again on the next `train_size` embeddings."""
        self._close()
        self._clear()

    def is_built(self) -> bool:
        """Whether the quantizer is trained (before, lookups are exact, in memory)."""
        return self._index is not None

    def train(self, samples: Any) -> None:
        """Trains the quantizer on `samples`, then moves the embeddings held so far to the lists.

        Args:
            samples: `[n, dim]` embeddings like those to be indexed, at least
                `nlist` of them.

        Raises:
            ValueError: If the samples are of the wrong shape or fewer than
                `nlist`, or the index is already trained.
        """
        samples = self._embeddings(samples, what="training samples")
        if self._index is not None:
            raise ValueError(
                f"{type(self).__name__}: the index is already trained. Call reset() first to "
                "train it again."
            )
        self._writable()
        self._train(self._prepare(samples))
        self._flush_pending()

    def get_config(self) -> dict[str, Any]:
        # No directory: an index rebuilt from its config works in a folder of its own.
        return {
            **super().get_config(),
            "nlist": self.nlist,
            "nprobe": self.nprobe,
            "train_size": self.train_size,
            "page_budget": self.page_budget,
        }

    def ids(self) -> np.ndarray:
        """The ids of the embeddings, in the order they were added (removed ones left out)."""
        parts = [chunk[chunk != REMOVED_ID] for _, chunk in self._id_chunks()]
        ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        ids.flags.writeable = False
        return ids

    def saved_files(self) -> list[str]:
        return [META_FILE, IDS_FILE, INDEX_FILE, LISTS_FILE]

    def _add(self, embeddings: np.ndarray, idxs: np.ndarray) -> None:
        if (idxs == REMOVED_ID).any():
            raise ValueError(
                f"{type(self).__name__}: the id {REMOVED_ID} marks removed rows; pass other ids."
            )
        self._writable()
        rows = np.arange(self._rows, self._rows + len(idxs), dtype=np.int64)
        with open(self.directory / IDS_FILE, "ab") as file:
            file.write(idxs.astype(np.int64).tobytes())
        self._rows += len(idxs)
        self._alive_count += len(idxs)
        if self._index is not None:
            self._add_to_lists(self._prepare(embeddings), rows)
            return
        self._pending.append((self._prepare(embeddings), rows))
        self._pending_count += len(rows)
        if self._pending_count >= self.train_size:
            self._train(np.concatenate([vectors for vectors, _ in self._pending]))
            self._flush_pending()

    def _remove(self, idxs: np.ndarray) -> None:
        self._writable()
        rows = self._rows_of(idxs)
        ids = np.memmap(self.directory / IDS_FILE, np.int64, mode="r+")
        ids[rows] = REMOVED_ID
        ids.flush()
        del ids
        self._alive_count -= len(rows)
        self._tombstones = np.union1d(self._tombstones, rows)

    def _present(self, idxs: np.ndarray) -> np.ndarray:
        return self._rows_of(idxs) >= 0

    def _compact(self) -> None:
        if not len(self._tombstones):
            return
        self._writable()
        if self._index is not None:
            self._remove_from_lists(self._tombstones)
        pending = []
        for vectors, rows in self._pending:
            keep = ~np.isin(rows, self._tombstones)
            pending.append((vectors[keep], rows[keep]))
        self._pending = pending
        self._pending_count = sum(len(rows) for _, rows in self._pending)
        self._tombstones = np.zeros(0, np.int64)

    def _lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = self._prepare(queries)
        if self._index is None:
            scores, rows = self._pending_lookup(queries, k)
        else:
            scores, rows = self._lists_lookup(queries, k)
        found = rows >= 0
        ids = np.memmap(self._source / IDS_FILE, np.int64, mode="r")
        idxs = np.where(found, ids[np.where(found, rows, 0)], -1)
        del ids
        distances = faiss_distances(self.distance, scores, found)
        return idxs.astype(np.int64), distances

    def _save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if self._unloaded_save and path.resolve() == self.directory.resolve():
            # Saving this new index there replaces the one found (and its ids file).
            self._writable()
        pending = [vectors for vectors, _ in self._pending]
        pending_rows = [rows for _, rows in self._pending]
        write_npz(
            path / META_FILE,
            {
                "config": np.array(json.dumps(self.get_config())),
                "rows": np.int64(self._rows),
                "alive_count": np.int64(self._alive_count),
                "tombstones": self._tombstones,
                "trained": np.bool_(self._index is not None),
                "pending": (
                    np.concatenate(pending) if pending else np.zeros((0, self.dim), np.float32)
                ),
                "pending_rows": (
                    np.concatenate(pending_rows) if pending_rows else np.zeros(0, np.int64)
                ),
            },
            kind=type(self).__name__,
            format_version=FORMAT_VERSION,
            compression=False,
        )
        same = path.resolve() == self._source.resolve()
        for file in (IDS_FILE, LISTS_FILE):
            if same:
                # Before training (or before the first add) the working folder lacks them.
                (path / file).touch()
                continue
            with _atomic.writing_file(path / file) as partial:
                if (self._source / file).exists():
                    shutil.copyfile(self._source / file, partial)
                else:
                    Path(partial).touch()
        with _atomic.writing_file(path / INDEX_FILE) as partial:
            if self._index is None:
                Path(partial).touch()
            else:
                self._faiss.write_index(self._index, str(partial))

    def _load(self, path: Path) -> None:
        owner = type(self).__name__
        arrays = read_npz(
            path / META_FILE,
            kind=owner,
            format_version=FORMAT_VERSION,
            keys=("config", "rows", "alive_count", "tombstones", "trained", "pending"),
            optional=("pending_rows",),
            owner=owner,
        )
        config = json.loads(str(arrays["config"]))
        self._check_saved_config(config, path)
        for file in (IDS_FILE, INDEX_FILE, LISTS_FILE):
            if not (path / file).exists():
                raise FileNotFoundError(
                    f"{owner}: {str(path / file)!r} is missing; save the index again."
                )
        rows, trained = int(arrays["rows"]), bool(arrays["trained"])
        tombstones = arrays["tombstones"].astype(np.int64)
        pending = arrays["pending"].astype(np.float32)
        pending_rows = arrays.get("pending_rows", np.zeros(0, np.int64)).astype(np.int64)
        index = None
        if trained:
            try:
                index = self._faiss.read_index(
                    str(path / INDEX_FILE),
                    # faiss always maps on-disk lists; IO_FLAG_MMAP would leave them unmapped.
                    self._faiss.IO_FLAG_READ_ONLY | self._faiss.IO_FLAG_ONDISK_SAME_DIR,
                )
            except RuntimeError as err:
                raise ValueError(
                    f"{owner}: the faiss index in {str(path / INDEX_FILE)!r} is corrupt ({err}). "
                    "Save the index again."
                ) from err
        removed_in_ids = rows - int(arrays["alive_count"])
        consistent = (
            (path / IDS_FILE).stat().st_size == 8 * rows
            and pending.shape == (len(pending_rows), self.dim)
            and (
                index is None
                or (
                    index.d == self.dim
                    and self._faiss.extract_index_ivf(index).nlist == self.nlist
                    and index.ntotal == rows - len(pending_rows) - removed_in_ids + len(tombstones)
                )
            )
        )
        if not consistent:
            raise ValueError(
                f"{owner}: the index saved in {str(path)!r} is inconsistent (its files do not "
                f"hold the {rows} rows its metadata records, or nlist/dim differ from "
                f"nlist={self.nlist}, dim={self.dim}). Save the index again."
            )
        self._close()
        # Loading the working folder itself keeps its files.
        self._clear(keep_files=path.resolve() == self.directory.resolve())
        self._index = index
        self._index_read_only = index is not None
        self._source = path
        self._rows, self._alive_count = rows, int(arrays["alive_count"])
        self._tombstones = tombstones
        if len(pending_rows):
            self._pending = [(pending, pending_rows)]
            self._pending_count = len(pending_rows)
        self._configure()

    # faiss.

    def _metric(self) -> int:
        if isinstance(self.distance, (CosineDistance, InnerProductSimilarity)):
            return self._faiss.METRIC_INNER_PRODUCT
        return self._faiss.METRIC_L2

    def _prepare(self, embeddings: np.ndarray) -> np.ndarray:
        embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
        if isinstance(self.distance, CosineDistance):
            norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
            embeddings = embeddings / np.maximum(norms, 1e-12)
        return embeddings

    def _train(self, samples: np.ndarray) -> None:
        """Trains the quantizer on prepared (for cosine, normalised) samples."""
        owner = type(self).__name__
        if len(samples) < self.nlist:
            raise ValueError(
                f"{owner}: training {self.nlist} cells needs at least {self.nlist} samples, "
                f"got {len(samples)}. Pass more samples or a smaller nlist."
            )
        faiss = self._faiss
        metric = self._metric()
        quantizer = (
            faiss.IndexFlatIP(self.dim)
            if metric == faiss.METRIC_INNER_PRODUCT
            else faiss.IndexFlatL2(self.dim)
        )
        index = faiss.IndexIVFFlat(quantizer, self.dim, self.nlist, metric)
        index.own_fields = True
        quantizer.this.disown()
        index.train(samples)
        lists = faiss.OnDiskInvertedLists(
            self.nlist, index.code_size, str(self.directory / LISTS_FILE)
        )
        index.replace_invlists(lists, True)
        lists.this.disown()
        self._index = index
        self._configure()

    def _configure(self) -> None:
        if self._index is not None:
            self._faiss.extract_index_ivf(self._index).nprobe = self.nprobe

    def _lists(self) -> Any:
        if self._index is None:
            return None
        return self._faiss.downcast_InvertedLists(
            self._faiss.extract_index_ivf(self._index).invlists
        )

    def _flush_pending(self) -> None:
        for vectors, rows in self._pending:
            keep = ~np.isin(rows, self._tombstones)
            self._add_to_lists(vectors[keep], rows[keep])
        self._tombstones = self._tombstones[~np.isin(self._tombstones, self._pending_rows())]
        self._pending, self._pending_count = [], 0

    def _pending_rows(self) -> np.ndarray:
        rows = [rows for _, rows in self._pending]
        return np.concatenate(rows) if rows else np.zeros(0, np.int64)

    def _add_to_lists(self, vectors: np.ndarray, rows: np.ndarray) -> None:
        """Appends to each list its rows, one list at a time, releasing the pages touched often.

        faiss' own `add_with_ids` appends row by row; when the lists, all of about the same
        length, double their capacity (each copied to a new place in the file) within one
        call, that call touches most of the file. Appending per list lets the pages be
        released between two lists.
        """
        faiss, lists = self._faiss, self._lists()
        ivf = faiss.extract_index_ivf(self._index)
        budget = _PageBudget(lists, self.page_budget)
        for start in range(0, len(rows), ADD_CHUNK):
            chunk = vectors[start : start + ADD_CHUNK]
            _, cells = ivf.quantizer.search(chunk, 1)
            order = np.argsort(cells[:, 0], kind="stable")
            cells = cells[order, 0]
            codes = np.ascontiguousarray(chunk[order]).view(np.uint8)
            chunk_rows = np.ascontiguousarray(rows[start : start + ADD_CHUNK][order])
            edges = np.flatnonzero(np.diff(cells)) + 1
            for first, stop in zip(np.r_[0, edges], np.r_[edges, len(cells)], strict=True):
                lists.add_entries(
                    int(cells[first]),
                    int(stop - first),
                    faiss.swig_ptr(chunk_rows[first:stop]),
                    faiss.swig_ptr(codes[first:stop]),
                )
                budget.check()
            ivf.ntotal += len(chunk)
            self._index.ntotal = ivf.ntotal
        budget.check(force=True)

    def _remove_from_lists(self, rows: np.ndarray) -> None:
        """Deletes `rows` from the lists, one list at a time (faiss' `remove_ids` reads all at
        once), releasing the pages touched as it goes."""
        faiss, lists = self._faiss, self._lists()
        ivf = faiss.extract_index_ivf(self._index)
        budget = _PageBudget(lists, self.page_budget)
        for cell in range(self.nlist):
            size = lists.list_size(cell)
            if not size:
                continue
            ids = faiss.rev_swig_ptr(lists.get_ids(cell), size).copy()
            keep = ~np.isin(ids, rows)
            if keep.all():
                continue
            codes = faiss.rev_swig_ptr(lists.get_codes(cell), size * lists.code_size)
            codes = np.ascontiguousarray(codes.reshape(size, lists.code_size)[keep])
            kept_ids = np.ascontiguousarray(ids[keep])
            lists.update_entries(
                cell, 0, len(kept_ids), faiss.swig_ptr(kept_ids), faiss.swig_ptr(codes)
            )
            lists.resize(cell, len(kept_ids))
            ivf.ntotal -= size - len(kept_ids)
            budget.check()
        self._index.ntotal = ivf.ntotal
        budget.check(force=True)

    def _lists_lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        faiss, lists = self._faiss, self._lists()
        params = faiss.SearchParametersIVF()
        params.nprobe = self.nprobe
        if len(self._tombstones):
            removed = faiss.IDSelectorBatch(self._tombstones)
            selector = faiss.IDSelectorNot(removed)
            params.sel = selector
        scores = np.empty((len(queries), k), np.float32)
        rows = np.empty((len(queries), k), np.int64)
        budget, step, start = _PageBudget(lists, self.page_budget), FIRST_QUERY_CHUNK, 0
        while start < len(queries):
            stop = start + step
            before = budget.grown()
            scores[start:stop], rows[start:stop] = self._index.search(
                queries[start:stop], k, params=params
            )
            start = stop
            # As many queries per step as touch at most half the page budget; the pages stay
            # mapped for the next steps (the kernel maps more than faiss reads, and mapping
            # them again costs more than the search) until they exceed the budget.
            after = budget.grown()
            touched = None if before is None or after is None else after - before
            if touched is not None and touched > self.page_budget // 2:
                step = max(1, step // 2)
            elif touched is not None and touched < self.page_budget // 4:
                step = min(MAX_QUERY_CHUNK, step * 2)
            budget.check()
        budget.check(force=True)
        return scores, rows

    def _pending_lookup(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact lookup among the embeddings held before training, tombstones left out."""
        vectors = np.concatenate([vectors for vectors, _ in self._pending])
        rows = self._pending_rows()
        keep = ~np.isin(rows, self._tombstones)
        vectors, rows = vectors[keep], rows[keep]
        if self._metric() == self._faiss.METRIC_INNER_PRODUCT:
            scores = queries @ vectors.T
            order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        else:
            scores = (
                (queries**2).sum(1)[:, None] - 2 * queries @ vectors.T + (vectors**2).sum(1)[None]
            )
            order = np.argsort(scores, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(scores, order, axis=1), rows[order]

    # Files.

    def _writable(self) -> None:
        """Copies a loaded folder's ids and lists into `directory` before the first change.

        A saved index found in `directory` when this search was created, and not loaded,
        is replaced (with a warning) by the first change.
        """
        if self._source == self.directory:
            if self._unloaded_save:
                warnings.warn(
                    f"{type(self).__name__}: {str(self.directory)!r} holds a saved index that "
                    "this search did not load; changing this new, empty index replaces it. Call "
                    "load() on that folder first to keep it, or pass another directory.",
                    UserWarning,
                    stacklevel=4,
                )
                (self.directory / META_FILE).unlink()
                self._clear()
            elif self._index_read_only:
                # Loaded in place: the changes go into the saved files themselves.
                self._reopen_writable()
            return
        for file in (IDS_FILE, LISTS_FILE, INDEX_FILE):
            shutil.copyfile(self._source / file, self.directory / file)
        self._source = self.directory
        self._reopen_writable()

    def _reopen_writable(self) -> None:
        """Maps the lists of `directory` writable (a loaded index maps them read-only)."""
        if self._index is not None:
            self._close()
            # Without IO_FLAG_MMAP or IO_FLAG_READ_ONLY faiss maps the lists writable.
            self._index = self._faiss.read_index(
                str(self.directory / INDEX_FILE), self._faiss.IO_FLAG_ONDISK_SAME_DIR
            )
            self._configure()
        self._index_read_only = False

    def _close(self) -> None:
        self._index = None

    def _id_chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        """Yields `(first row, ids)` of the ids file, `ID_CHUNK` at a time."""
        path = self._source / IDS_FILE
        # The state's rows: the folder may hold a saved index this one has not loaded.
        total = self._rows
        with open(path, "rb") as file:
            for start in range(0, total, ID_CHUNK):
                yield start, np.fromfile(file, np.int64, min(ID_CHUNK, total - start))

    def _rows_of(self, idxs: np.ndarray) -> np.ndarray:
        """The row of each id, -1 for an id not in the index."""
        rows = np.full(len(idxs), -1, np.int64)
        order = np.argsort(idxs)
        sorted_idxs = idxs[order]
        for start, chunk in self._id_chunks():
            hits = np.flatnonzero(np.isin(chunk, sorted_idxs))
            if len(hits):
                where = np.searchsorted(sorted_idxs, chunk[hits])
                rows[order[where]] = start + hits
        return rows
