"""A store that keeps its records in memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import keras
import numpy as np

from tensorflow_similarity._growing_array import GrowingArray
from tensorflow_similarity._npz import read_npz, write_npz
from tensorflow_similarity.stores.store import Store

FORMAT_VERSION = 1
FILE_NAME = "memory_store.npz"
_KEYS = ("embeddings", "labels", "has_label", "data_kind", "data")


@keras.saving.register_keras_serializable(package="Similarity")
class MemoryStore(Store):
    """Records kept in memory: embeddings in one float32 array, labels and data beside.

    `save` writes one compressed `.npz` file, `memory_store.npz`, holding a
    format version. Data that stack into one numeric or string array (images
    of one shape, say) are saved as that array; any other data are saved as
    pickled Python objects, which `load` unpickles, so load only files you
    trust. `load` reads and checks the whole file before replacing anything.

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

    def _save(self, path: Path, compression: bool) -> None:
        dim = self.dim or 0
        embeddings = self._embeddings.view() if self._embeddings else np.zeros((0, dim))
        data_kind, data = _pack_data(self._data)
        write_npz(
            path / FILE_NAME,
            {
                "embeddings": embeddings.astype(np.float32),
                "labels": self._labels.view(),
                "has_label": self._has_label.view(),
                "data_kind": np.array(data_kind),
                "data": data,
            },
            kind=type(self).__name__,
            format_version=FORMAT_VERSION,
            compression=compression,
        )

    def _load(self, path: Path) -> None:
        arrays = read_npz(
            path / FILE_NAME,
            kind=type(self).__name__,
            format_version=FORMAT_VERSION,
            keys=_KEYS,
            owner=type(self).__name__,
            pickled=("data",),
        )
        embeddings, labels, has_label = arrays["embeddings"], arrays["labels"], arrays["has_label"]
        data_kind, data = str(arrays["data_kind"]), arrays["data"]
        count = len(labels)
        consistent = (
            embeddings.ndim == 2
            and len(embeddings) == count
            and has_label.shape == (count,)
            and data_kind in ("none", "array", "object")
            and (data_kind == "none" or len(data) == count)
        )
        if not consistent:
            raise ValueError(
                f"{type(self).__name__}: {str(path / FILE_NAME)!r} is inconsistent (its arrays "
                "disagree on the number of records). Save the store again."
            )
        self.reset()
        if count:
            data_list = [None] * count if data_kind == "none" else list(data)
            self._add(embeddings.astype(np.float32), labels, has_label.astype(bool), data_list)


def _pack_data(data: list[Any]) -> tuple[str, np.ndarray]:
    """Returns how the data are saved (`none`, `array`, `object`) and the array saving them."""
    if all(item is None for item in data):
        return "none", np.zeros(0)
    try:
        array = np.asarray(data)
    except ValueError:
        array = None
    if array is not None and array.dtype != object and len(array) == len(data):
        return "array", array
    packed = np.empty(len(data), dtype=object)
    for i, item in enumerate(data):
        packed[i] = item
    return "object", packed
