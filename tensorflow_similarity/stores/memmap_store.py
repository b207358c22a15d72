"""A store whose records live in raw files on disk, read a row at a time or memory-mapped."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tensorflow_similarity import _atomic
from tensorflow_similarity.stores.npz import check_finite_rows
from tensorflow_similarity.stores.store import Store

FORMAT_VERSION = 1
META_NAME = "memmap_store.json"
# Written once `keep` has written its new column files (*.bin.compact): the description
# after it. Its presence at open finishes the switch a crash interrupted.
COMPACT_NAME = "memmap_store.compact.json"
_COMPACT_ROWS = 2**16
# The most one positioned read copies at once: a long run of rows is read in pieces.
_READ_BYTES = 16 << 20
# Column files: name -> dtype of one element.
_COLUMNS = {"embeddings": np.float32, "labels": np.int64, "has_label": np.uint8}


@keras.saving.register_keras_serializable(package="Similarity")
class MemmapStore(Store):
    """Records in raw files in the folder `path`, for indexes larger than memory.

    Each column is a file of fixed-size rows appended in place:
    `embeddings.bin` (float32 `[n, dim]`), `labels.bin` (int64),
    `has_label.bin` (uint8) and, when records carry data, `data.bin`.
    `get` and `batch_get` (so an index's lookups) read the rows asked for
    by position, without mapping the files, and so do the passes over
    every row (the check at `load`, `keep`, the copy before a change), a
    block at a time: none leaves the files' pages counted in the
    process's resident memory (the kernel's page cache keeps what it can
    spare), whatever the store's size; nor do appends.
    `embedding_rows` is a read-only `numpy.memmap` of the embeddings,
    whose pages stay resident while it is read.
    `memmap_store.json` holds the format version, `dim`, the data's dtype
    and shape, and the record count, rewritten (atomically) after the
    column files are appended and flushed: a crash during `batch_add`
    leaves the store as it was before that batch, and the extra bytes are
    cut on the next append. Data must be numeric arrays of one shape and
    dtype (images, say), fixed by the first batch that has data; a store
    whose first batch had no data takes none. Opening a folder that holds a
    store reopens it.

    `save(path)` copies the files into another folder (`compression` is
    ignored: raw rows are what makes the memory maps work); `load(path)`
    checks the saved store there completely, then copies it in over this
    one, or, when `path` is this store's own folder (`Indexer.load` opens a
    saved index's store so), opens it in place, copy-on-write: reads use
    the saved files, and the first `add` copies them (a pass over the
    store's files, as much disk again) into a private folder, a hidden
    sibling of the saved one (`.NAME.copy-*`, or one in the system's
    temporary folder if the parent cannot be written), which the store
    then lives in; a first `reset` starts an empty private folder. The
    saved folder is never written to, so it loads as saved until it is
    saved again; the private folder is deleted when the store is garbage
    collected or the process exits, so save the index to keep what was
    added. `path` (and `get_config`) name the private folder from then on.

    Args:
        path: The folder of the files (created if needed).
        name: The store's name. Defaults to `"memmap"`.
        verbose: Verbosity. Defaults to 0.

    Raises:
        ValueError: If `path` holds a store of another format version, or
            whose files are shorter than its count says.

    Example:

    >>> import tempfile
    >>> from tensorflow_similarity.stores import MemmapStore
    >>> store = MemmapStore(tempfile.mkdtemp())
    >>> store.batch_add([[0.0, 1.0], [1.0, 0.0]], labels=[3, None])
    [0, 1]
    >>> store.get(1)[1] is None, MemmapStore(store.path).size()
    (True, 2)
    """

    default_name = "memmap"

    def __init__(self, path: Path | str, name: str | None = None, verbose: int = 0) -> None:
        super().__init__(name=name, verbose=verbose)
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        _finish_compaction(self.path)
        if (self.path / META_NAME).exists():
            self._meta = _read_meta(self.path, type(self).__name__)
        else:
            self._meta = {"dim": None, "count": 0, "data": None}
            self._write_meta()
        self._embedding_map: np.ndarray | None = None
        self._files: _ColumnFiles | None = None
        # The saved folder this store reads in place, until its first change copies it.
        self._opened_saved: Path | None = None

    @property
    def dim(self) -> int | None:
        return self._meta["dim"]

    def size(self) -> int:
        return self._meta["count"]

    def reset(self) -> None:
        self._copy_on_write(keep_records=False)
        self._close_columns()
        for file in self.path.glob("*.bin"):
            file.unlink()
        self._meta = {"dim": None, "count": 0, "data": None}
        self._write_meta()

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "path": str(self.path)}

    def _add(
        self, embeddings: np.ndarray, labels: np.ndarray, has_label: np.ndarray, data: list[Any]
    ) -> None:
        data_spec, data_rows = self._check_record_data(data)
        columns = {
            "embeddings": embeddings.astype(np.float32),
            "labels": labels.astype(np.int64),
            "has_label": has_label.astype(np.uint8),
        }
        if data_rows is not None:
            columns["data"] = data_rows
        self._copy_on_write(keep_records=True)
        count = self.size()
        self._close_columns()
        for column, rows in columns.items():
            file = self.path / f"{column}.bin"
            row_bytes = rows[0].nbytes if len(rows) else 0
            with open(file, "ab") as handle:
                pass  # creates the file if needed
            with open(file, "r+b") as handle:
                handle.truncate(count * row_bytes)  # drops a crashed batch's bytes
                handle.seek(0, os.SEEK_END)
                handle.write(np.ascontiguousarray(rows).tobytes())
                handle.flush()
                os.fsync(handle.fileno())
        self._meta = {
            "dim": embeddings.shape[1],
            "count": count + len(embeddings),
            "data": data_spec,
        }
        self._write_meta()

    def embedding_rows(self) -> np.ndarray:
        if self.size() == 0:
            return np.zeros((0, self.dim or 0), np.float32)
        if self._embedding_map is None:
            self._embedding_map = np.memmap(
                self._column_files().handles["embeddings"],
                np.float32,
                "r",
                shape=(self.size(), self.dim),
            )
        return self._embedding_map

    def _keep(self, mask: np.ndarray) -> None:
        """Writes the kept rows into new column files and switches them in, crash-safely.

        A store opened in place on a saved folder writes them into its
        private folder instead (the saved one is never written to).
        """
        columns = self._column_rows() if self.size() else {}
        saved, count = self._opened_saved, int(mask.sum())
        target = self.path if saved is None else _private_folder(saved)
        suffix = ".compact" if saved is None else ""
        for column, rows in columns.items():
            write_rows(target / f"{column}.bin{suffix}", rows, mask)
        meta = {**self._meta, "count": count}
        self._close_columns()
        if saved is not None:
            self._opened_saved, self.path = None, target
            weakref.finalize(self, shutil.rmtree, str(target), True)
            self._meta = meta
            self._write_meta()
            return
        description = {"format_version": FORMAT_VERSION, "kind": type(self).__name__, **meta}
        _atomic.write_text(self.path / COMPACT_NAME, json.dumps(description))
        _finish_compaction(self.path)
        self._meta = meta

    def _get(self, idxs: np.ndarray) -> tuple[np.ndarray, list[int | None], list[Any]]:
        if self.size() == 0:
            return np.zeros((0, 0), np.float32), [], []
        # Positioned reads, not the memory maps: a page faulted in through a map brings its
        # whole page-cache folio with it, and it stays resident until unmapped. Measured on
        # a store of 2e6 128-d rows (a 1 GB file), 640 random rows read through the map added
        # 725 MB to RssFile; releasing the map after each call (madvise) frees it again but
        # not the peak. One read per run of consecutive rows costs about a microsecond a row.
        rows, inverse = np.unique(idxs, return_inverse=True)
        files = self._column_files()
        columns = {column: files.read(column, rows)[inverse] for column in files.layout}
        labels, has_label = columns["labels"], columns["has_label"]
        return (
            columns["embeddings"],
            [int(label) if has else None for label, has in zip(labels, has_label, strict=True)],
            list(columns["data"]) if "data" in columns else [None] * len(idxs),
        )

    def saved_files(self, path: Path | str) -> dict[str, int | None]:
        """The store's files in the folder `path`: its description whole, its columns' records.

        A column file may hold bytes past its records (a batch whose append
        crashed, cut by the next append), and grows when records are added
        to a store opened on the folder: only the bytes of the records
        `memmap_store.json` counts are the saved content.

        Raises:
            ValueError: If `path` holds no readable store.
        """
        path = Path(path)
        meta = _read_meta(path, type(self).__name__)
        files: dict[str, int | None] = {META_NAME: None}
        if meta["count"]:
            for column, row_bytes in _row_bytes(meta).items():
                files[f"{column}.bin"] = meta["count"] * row_bytes
        return files

    def _save(self, path: Path, compression: bool) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if path.resolve() == self.path.resolve():
            return
        for column in (*_COLUMNS, "data"):
            source = self.path / f"{column}.bin"
            if source.exists():
                shutil.copyfile(source, path / f"{column}.bin")
        shutil.copyfile(self.path / META_NAME, path / META_NAME)

    def _load(self, path: Path, safe_mode: bool) -> None:
        del safe_mode  # raw numeric rows: nothing is ever unpickled
        owner = type(self).__name__
        if not (path / META_NAME).is_file():
            raise FileNotFoundError(
                f"{owner}: no saved store at {str(path)!r} (no {META_NAME}). Pass the folder "
                "given to save()."
            )
        meta = _read_meta(path, owner)
        files = _ColumnFiles(path, _layout(meta)) if meta["count"] else None
        if files is not None:
            try:
                rows = _ColumnRows(files, "embeddings", meta["count"])
                check_finite_rows(rows, path / "embeddings.bin", owner=owner)
            except BaseException:
                files.close()
                raise
        if path.resolve() == self.path.resolve():
            self._close_columns()
            self._meta = meta
            self._opened_saved = path
            # Kept open: a later save over the folder replaces its files, and this
            # reader keeps reading the ones it loaded, never a mix.
            self._files = files
            return
        if files is not None:
            files.close()
        staged = []
        for column in (*_COLUMNS, "data"):
            source = path / f"{column}.bin"
            if source.exists():
                partial = self.path / f"{column}.bin.partial"
                shutil.copyfile(source, partial)
                staged.append((partial, self.path / f"{column}.bin"))
        self._close_columns()
        (self.path / "data.bin").unlink(missing_ok=True)
        for partial, target in staged:
            os.replace(partial, target)
        self._meta = meta
        self._write_meta()

    def _copy_on_write(self, keep_records: bool) -> None:
        """Moves a store opened in place on a saved folder to a private folder, before a change.

        With `keep_records`, the saved column files are copied there first;
        on an error (a full disk) the private folder is deleted and the
        store still reads the saved folder.

        Raises:
            OSError: If the private folder cannot be made or written; it
                names the saved folder and the private one.
        """
        saved = self._opened_saved
        if saved is None:
            return
        private = _private_folder(saved)
        try:
            if keep_records:
                # From the files opened at load, not the folder, which a save may have replaced.
                for column, rows in (self._column_rows() if self.size() else {}).items():
                    write_rows(private / f"{column}.bin", rows)
        except OSError as error:
            shutil.rmtree(private, ignore_errors=True)
            raise OSError(
                error.errno,
                f"{type(self).__name__}: copying the index saved in {str(saved)!r} into "
                f"{str(private)!r} before changing it failed ({error.strerror or error}). "
                "Nothing was changed; free disk space there, or load the index with "
                "kv_store=MemmapStore(another_folder).",
            ) from error
        self._close_columns()
        self._opened_saved, self.path = None, private
        weakref.finalize(self, shutil.rmtree, str(private), True)
        if keep_records:
            self._write_meta()

    def _column_files(self) -> _ColumnFiles:
        """The column files, opened at the first read after a change (or at an in-place load)."""
        if self._files is None:
            self._files = _ColumnFiles(self.path, _layout(self._meta))
        return self._files

    def _column_rows(self) -> dict[str, _ColumnRows]:
        """Every column's records, read a slice at a time, for the passes over every row."""
        files, count = self._column_files(), self.size()
        return {column: _ColumnRows(files, column, count) for column in files.layout}

    def _close_columns(self) -> None:
        """Forgets the map and closes the files, before their count or their folder changes."""
        self._embedding_map = None
        if self._files is not None:
            self._files.close()
            self._files = None

    def _check_record_data(self, data: list[Any]) -> tuple[dict | None, np.ndarray | None]:
        owner = type(self).__name__
        spec = self._meta["data"]
        if all(item is None for item in data):
            if spec is not None:
                raise ValueError(
                    f"{owner}: this store keeps data with every record (arrays of shape "
                    f"{spec['shape']}, {spec['dtype']}); pass data for these records too."
                )
            return None, None
        if self.size() and spec is None:
            raise ValueError(
                f"{owner}: this store's first records had no data, so it keeps none; add "
                "these records without data, or use a new store."
            )
        try:
            rows = np.stack([np.asarray(item) for item in data])
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"{owner}: data must be arrays of one shape and dtype ({err}). Keep other data "
                "in a MemoryStore."
            ) from err
        if rows.dtype == object or rows.dtype.kind not in "biuf":
            raise ValueError(
                f"{owner}: data must be numeric arrays; got dtype {rows.dtype}. Keep other data "
                "in a MemoryStore."
            )
        found = {"dtype": rows.dtype.str, "shape": list(rows.shape[1:])}
        if spec is not None and found != spec:
            raise ValueError(
                f"{owner}: data must be arrays of shape {spec['shape']} and dtype "
                f"{spec['dtype']}, as the first records'; got {found['shape']} {found['dtype']}."
            )
        return found, rows

    def _write_meta(self) -> None:
        meta = {"format_version": FORMAT_VERSION, "kind": type(self).__name__, **self._meta}
        _atomic.write_text(self.path / META_NAME, json.dumps(meta))


class _ColumnFiles:
    """A store's column files, open for reading rows by their position.

    Open, the files stay the ones read even if others are renamed over their
    names (a save over the folder). Closed when `close` is called or this
    object is garbage collected.

    Args:
        path: The store's folder.
        layout: For each column, the dtype and shape of one row.
    """

    def __init__(self, path: Path, layout: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> None:
        self.layout = layout
        self.handles: dict[str, Any] = {}
        self.close = weakref.finalize(self, _close_handles, self.handles)
        try:
            for column in layout:
                self.handles[column] = open(path / f"{column}.bin", "rb", buffering=0)
        except BaseException:
            self.close()
            raise

    def read(self, column: str, rows: np.ndarray) -> np.ndarray:
        """The `rows` (sorted, distinct) of `column`: one positioned read a run of consecutive rows.

        Raises:
            ValueError: If the file ends before a row (the store is truncated).
        """
        dtype, shape = self.layout[column]
        out = np.empty((len(rows), *shape), dtype)
        row_bytes = dtype.itemsize * int(np.prod(shape))
        if not out.size:
            return out
        buffer = memoryview(out.view(np.uint8).reshape(-1))
        ends = np.flatnonzero(np.diff(rows) != 1) + 1
        handle = self.handles[column]
        for start, end in zip([0, *ends.tolist()], [*ends.tolist(), len(rows)], strict=True):
            part = buffer[start * row_bytes : end * row_bytes]
            _pread_into(handle, part, int(rows[start]) * row_bytes)
        return out


class _ColumnRows:
    """The first `count` rows of a column of open files, read by position a slice at a time.

    What the passes over every row (`keep`, the copy before a change, the
    check at load) read: through a memory map, the pages of the file would
    stay resident until the pass ends, as much memory as the file.

    Args:
        files: The open column files.
        column: The column.
        count: The number of rows.
    """

    def __init__(self, files: _ColumnFiles, column: str, count: int) -> None:
        dtype, shape = files.layout[column]
        self.files, self.column = files, column
        self.dtype, self.shape = dtype, (count, *shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        return self.files.read(self.column, np.arange(*rows.indices(len(self))))


def _pread_into(handle: Any, buffer: memoryview, offset: int) -> None:
    """Fills `buffer` from the open file `handle` at `offset`, in reads of `_READ_BYTES` at most.

    `os.pread` leaves the file's position alone, so concurrent reads need no lock.
    """
    done = 0
    while done < len(buffer):
        chunk = _read_at(handle, min(len(buffer) - done, _READ_BYTES), offset + done)
        if not chunk:
            raise ValueError(
                f"MemmapStore: {handle.name!r} ends at byte {offset + done}, before the records "
                "its description counts. The store is corrupt or truncated; load a saved copy."
            )
        buffer[done : done + len(chunk)] = chunk
        done += len(chunk)


_SEEK_LOCK = threading.Lock()


def _read_at(handle: Any, size: int, offset: int) -> bytes:
    """Up to `size` bytes of `handle` at `offset` (fewer at the end of the file)."""
    if hasattr(os, "pread"):
        return os.pread(handle.fileno(), size, offset)
    # Windows has no pread: seek and read, under a lock since the position is shared.
    with _SEEK_LOCK:
        handle.seek(offset)
        return handle.read(size)


def _close_handles(handles: dict[str, Any]) -> None:
    for handle in handles.values():
        handle.close()


def write_rows(file: Path, rows: np.ndarray | _ColumnRows, mask: np.ndarray | None = None) -> None:
    """Writes `rows` (those where `mask` is true) raw to `file`, a block at a time, flushed."""
    with open(file, "wb") as out:
        for start in range(0, len(rows), _COMPACT_ROWS):
            block = rows[start : start + _COMPACT_ROWS]
            if mask is not None:
                block = block[mask[start : start + _COMPACT_ROWS]]
            out.write(np.ascontiguousarray(block))
        out.flush()
        os.fsync(out.fileno())


def _finish_compaction(path: Path) -> None:
    """Completes or undoes a `keep` a crash interrupted in the store folder `path`.

    Before its description was written the new column files are dropped;
    after, they are switched in and the description becomes the store's.
    """
    marker = path / COMPACT_NAME
    pending = sorted(path.glob("*.bin.compact"))
    if not marker.exists():
        for file in pending:
            file.unlink()
        return
    for file in pending:
        os.replace(file, path / file.name[: -len(".compact")])
    _atomic.fsync_dir(path)
    _atomic.write_text(path / META_NAME, marker.read_text())
    marker.unlink()
    _atomic.fsync_dir(path)


def _private_folder(saved: Path) -> Path:
    """A new folder for a copy of the store saved in `saved`: its sibling, else a temporary one."""
    try:
        return Path(tempfile.mkdtemp(prefix=f".{saved.name}.copy-", dir=saved.parent))
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"{saved.name}.copy-"))


def _read_meta(path: Path, owner: str) -> dict[str, Any]:
    """Reads and checks a store's metadata and the length of its files."""
    try:
        meta = json.loads((path / META_NAME).read_text())
        version, kind = meta["format_version"], meta["kind"]
        dim, count, spec = meta["dim"], int(meta["count"]), meta["data"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"{owner}: {str(path / META_NAME)!r} is not a readable store description "
            f"({type(err).__name__}: {err}). The store is corrupt."
        ) from err
    if kind != owner or version != FORMAT_VERSION:
        raise ValueError(
            f"{owner}: {str(path)!r} holds a {kind!r} store of format version {version}; this "
            f"version reads {owner!r} stores of format version {FORMAT_VERSION}."
        )
    valid_dim = (dim is None and count == 0) or (type(dim) is int and dim >= 1)
    if count < 0 or not valid_dim:
        raise ValueError(
            f"{owner}: {str(path / META_NAME)!r} describes {count} records of dim {dim!r}, "
            "which no store holds. The store is corrupt."
        )
    if spec is not None:
        try:
            dtype = np.dtype(spec["dtype"])
            shape = [int(n) for n in spec["shape"]]
        except (TypeError, ValueError, KeyError) as err:
            dtype, shape = None, None
            problem = f"{type(err).__name__}: {err}"
        if dtype is None or dtype.kind not in "biuf" or min(shape, default=0) < 0:
            found = problem if dtype is None else f"dtype {dtype}, shape {shape}"
            raise ValueError(
                f"{owner}: {str(path / META_NAME)!r} describes data that are not numeric rows "
                f"({found}). The store is corrupt."
            )
    row_bytes = _row_bytes({"dim": dim, "data": spec})
    for column, size in row_bytes.items():
        file = path / f"{column}.bin"
        found = file.stat().st_size if file.exists() else 0
        if count and found < count * size:
            raise ValueError(
                f"{owner}: {str(file)!r} holds {found} bytes but {count} records need "
                f"{count * size}. The store is corrupt or truncated."
            )
    return {"dim": dim, "count": count, "data": spec}


def _layout(meta: dict[str, Any]) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The dtype and shape of one row of each column file of a store described by `meta`."""
    layout = {
        "embeddings": (np.dtype(np.float32), (meta["dim"] or 0,)),
        "labels": (np.dtype(np.int64), ()),
        "has_label": (np.dtype(np.uint8), ()),
    }
    spec = meta["data"]
    if spec is not None:
        layout["data"] = (np.dtype(spec["dtype"]), tuple(int(n) for n in spec["shape"]))
    return layout


def _row_bytes(meta: dict[str, Any]) -> dict[str, int]:
    """The bytes one record takes in each column file of a store described by checked `meta`."""
    return {
        column: dtype.itemsize * int(np.prod(shape))
        for column, (dtype, shape) in _layout(meta).items()
    }
