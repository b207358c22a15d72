"""A store that keeps its records in memory."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tensorflow_similarity import _atomic
from tensorflow_similarity.stores.growing_array import GrowingArray
from tensorflow_similarity.stores.npz import (
    check_finite_rows,
    memory_mapped_rows,
    read_npz,
    write_npz,
)
from tensorflow_similarity.stores.store import Store

# 2: the embeddings are raw in their own .npy, memory-mapped by load. 1 (the embeddings
# inside the npz) still loads.
FORMAT_VERSION = 2
FILE_NAME = "memory_store.npz"
EMBEDDINGS_FILE = "memory_store_embeddings.npy"
_KEYS = ("labels", "has_label", "data_kind", "data")
# Only in files whose data_kind is "ragged": one row of shape per record.
_SHAPES_KEY = "data_shapes"


@keras.saving.register_keras_serializable(package="Similarity")
class MemoryStore(Store):
    """Records kept in memory: embeddings in one float32 array, labels and data beside.

    `save` writes the embeddings raw (`memory_store_embeddings.npy`, written
    and read at disk speed) and the labels and data into
    `memory_store.npz` (compressed unless `compression=False`), holding a
    format version. `load` memory-maps the embeddings (read-only; the first
    record added copies them into memory), so a large index opens without
    being read into memory. Data that NumPy stores without pickle are saved as plain
    arrays: items that stack into one numeric or string array (images of one
    shape, strings, numbers), or numeric or string arrays of one dtype kind
    and rank but different shapes (saved concatenated, with their shapes).
    Any other data (dicts, a mix of `None` and arrays, ...) can only be saved
    pickled, with a warning: `load` refuses them unless given
    `safe_mode=False`, because unpickling a file runs code it names. `load`
    reads and checks the whole file before replacing anything.

    Args:
        name: The store's name. Defaults to `"memory"`.
        verbose: Verbosity. Defaults to 0.

    Example:

    >>> from tensorflow_similarity.stores import MemoryStore
    >>> store = MemoryStore()
    >>> store.batch_add([[0.0, 1.0], [1.0, 0.0]], labels=[3, 4], data=["a", "b"])
    [0, 1]
    >>> store.get(1)[1:]
    (4, 'b')
    """

    default_name = "memory"

    def __init__(self, name: str | None = None, verbose: int = 0) -> None:
        super().__init__(name=name, verbose=verbose)
        self.reset()

    @property
    def dim(self) -> int | None:
        return None if self._embeddings is None else self._embeddings.row_shape[0]

    def size(self) -> int:
        return len(self._labels)

    def reset(self) -> None:
        self._embeddings: GrowingArray | None = None
        self._labels = GrowingArray((), np.int64)
        self._has_label = GrowingArray((), bool)
        self._data: list[Any] = []

    def _add(
        self, embeddings: np.ndarray, labels: np.ndarray, has_label: np.ndarray, data: list[Any]
    ) -> None:
        if self._embeddings is None:
            self._embeddings = GrowingArray((embeddings.shape[1],), np.float32)
        self._embeddings.extend(embeddings)
        self._labels.extend(labels)
        self._has_label.extend(has_label)
        self._data.extend(data)

    def embedding_rows(self) -> np.ndarray:
        if self._embeddings is None:
            return np.zeros((0, 0), np.float32)
        return self._embeddings.view()

    def _keep(self, mask: np.ndarray) -> None:
        if self._embeddings is not None:
            self._embeddings.replace(np.array(self._embeddings.view()[mask]))
        self._labels.replace(self._labels.view()[mask])
        self._has_label.replace(self._has_label.view()[mask])
        self._data = [item for item, kept in zip(self._data, mask.tolist(), strict=True) if kept]

    def _get(self, idxs: np.ndarray) -> tuple[np.ndarray, list[int | None], list[Any]]:
        if self._embeddings is None:
            return np.zeros((0, 0), np.float32), [], []
        labels = self._labels.view()[idxs]
        has_label = self._has_label.view()[idxs]
        return (
            self._embeddings.view()[idxs],
            [int(label) if has else None for label, has in zip(labels, has_label, strict=True)],
            [self._data[i] for i in idxs],
        )

    def saved_files(self, path: Path | str) -> dict[str, int | None]:
        """The npz and, from format version 2 on, the raw embeddings (if `path` holds them)."""
        files: dict[str, int | None] = {FILE_NAME: None}
        if (Path(path) / EMBEDDINGS_FILE).exists():
            files[EMBEDDINGS_FILE] = None
        return files

    def _save(self, path: Path, compression: bool) -> None:
        dim = self.dim or 0
        embeddings = self._embeddings.view() if self._embeddings else np.zeros((0, dim))
        data_kind, data, shapes = _pack_data(self._data)
        if data_kind == "object":
            warnings.warn(
                f"{type(self).__name__}: the records' data are not numeric or string arrays "
                f"(e.g. a {type(next(d for d in self._data if d is not None)).__name__}), so "
                f"{FILE_NAME} stores them pickled, and loading it needs safe_mode=False. Index "
                "arrays or strings (or no data) to get a file that loads in safe mode.",
                UserWarning,
                stacklevel=3,
            )
        arrays = {
            "dim": np.int64(dim),
            "labels": self._labels.view(),
            "has_label": self._has_label.view(),
            "data_kind": np.array(data_kind),
            "data": data,
        }
        if shapes is not None:
            arrays[_SHAPES_KEY] = shapes
        write_npz(
            path / FILE_NAME,
            arrays,
            kind=type(self).__name__,
            format_version=FORMAT_VERSION,
            compression=compression,
        )
        with _atomic.writing_file(path / EMBEDDINGS_FILE) as partial, open(partial, "wb") as out:
            np.save(out, np.asarray(embeddings, np.float32), allow_pickle=False)

    def _load(self, path: Path, safe_mode: bool) -> None:
        file = path / FILE_NAME
        arrays = read_npz(
            file,
            kind=type(self).__name__,
            format_version=(1, FORMAT_VERSION),
            keys=_KEYS,
            owner=type(self).__name__,
            optional=(_SHAPES_KEY, "embeddings"),
            safe_mode=safe_mode,
        )
        if int(arrays["format_version"]) == 1:
            embeddings = arrays.get("embeddings", np.zeros(0))
        else:
            file = path / EMBEDDINGS_FILE
            embeddings = memory_mapped_rows(
                file, type(self).__name__, "Pass the folder given to save()."
            )
        labels, has_label = arrays["labels"], arrays["has_label"]
        data_kind, data = str(arrays["data_kind"]), arrays["data"]
        count = len(labels)
        try:
            data_list = _unpack_data(data_kind, data, arrays.get(_SHAPES_KEY), count)
        except ValueError as err:
            data_list = None
            problem = str(err)
        else:
            problem = (
                "its arrays disagree on the number of records, or its embeddings are not numbers"
            )
        consistent = (
            data_list is not None
            and embeddings.ndim == 2
            and embeddings.dtype.kind in "iuf"
            and len(embeddings) == count
            and labels.ndim == 1
            and has_label.shape == (count,)
        )
        if not consistent:
            raise ValueError(
                f"{type(self).__name__}: {str(file)!r} is inconsistent ({problem}). Save the "
                "store again."
            )
        check_finite_rows(embeddings, file, owner=type(self).__name__)
        self.reset()
        if count:
            self._embeddings = GrowingArray((embeddings.shape[1],), np.float32)
            # Taken over, not copied: a memory map stays one until the first add.
            self._embeddings.replace(
                embeddings if embeddings.dtype == np.float32 else embeddings.astype(np.float32)
            )
            self._labels.replace(labels.astype(np.int64))
            self._has_label.replace(has_label.astype(bool))
            self._data = data_list


def _pack_data(data: list[Any]) -> tuple[str, np.ndarray, np.ndarray | None]:
    """Returns how the data are saved, the array saving them and, if ragged, their shapes.

    The kinds: `none` (no data), `array` (the items stack into one plain
    array), `ragged` (plain arrays of one dtype kind and rank but several
    shapes, saved flattened end to end), `object` (anything else, pickled).
    """
    if all(item is None for item in data):
        return "none", np.zeros(0), None
    try:
        array = np.asarray(data)
    except ValueError:
        array = None
    if array is not None and array.dtype != object and len(array) == len(data):
        return "array", array, None
    items = [None if item is None else np.asarray(item) for item in data]
    plain = all(item is not None and item.dtype != object for item in items)
    if plain and len({(item.dtype.kind, item.ndim) for item in items}) == 1:
        flat = np.concatenate([item.reshape(-1) for item in items])
        return "ragged", flat, np.array([item.shape for item in items], np.int64)
    packed = np.empty(len(data), dtype=object)
    for i, item in enumerate(data):
        packed[i] = item
    return "object", packed, None


def _unpack_data(kind: str, data: np.ndarray, shapes: np.ndarray | None, count: int) -> list[Any]:
    """Returns the `count` items that `_pack_data` saved as `kind`.

    Raises:
        ValueError: If the arrays do not describe `count` items of that kind.
    """
    if kind == "none":
        return [None] * count
    if kind in ("array", "object"):
        if data.ndim == 0 or len(data) != count:
            raise ValueError(f"{count} records but data for {data.size}")
        return list(data)
    if kind != "ragged":
        raise ValueError(f"unknown data kind {kind!r}")
    if shapes is None or shapes.ndim != 2 or len(shapes) != count or (shapes < 0).any():
        raise ValueError(f"ragged data needs {count} shapes")
    sizes = np.prod(shapes, axis=1, dtype=np.int64)
    if data.ndim != 1 or int(sizes.sum()) != data.size:
        raise ValueError(f"the shapes need {int(sizes.sum())} values, the data hold {data.size}")
    ends = np.cumsum(sizes)
    return [
        data[end - size : end].reshape(shape)
        for end, size, shape in zip(ends, sizes, shapes, strict=True)
    ]
