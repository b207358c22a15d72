"""The base class of key-value stores of indexed records."""

from __future__ import annotations

import abc
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tensorflow_similarity._validation import check_int, is_int


@keras.saving.register_keras_serializable(package="Similarity")
class Store(abc.ABC):
    """Records of `(embedding, label, data)` under consecutive integer ids `0, 1, ...`.

    A search index keeps the ids with the embeddings; the store maps an id
    back to its record. The base checks every argument before any work (a
    batch is added entirely or not at all) and leaves subclasses `_add`,
    `_get`, `size`, `reset`, `_save`, `_load` and `_columns`. A label is an
    integer or `None`; `data` is anything (an image, a string), kept as
    given. The embedding size is fixed by the first record.

    Args:
        name: The store's name. Defaults to the subclass's.
        verbose: Verbosity, 0 or 1. Defaults to 0.
    """

    default_name = "store"

    def __init__(self, name: str | None = None, verbose: int = 0) -> None:
        self.name = self.default_name if name is None else str(name)
        self.verbose = check_int("verbose", verbose, minimum=0, owner=type(self).__name__)

    def add(self, embedding: Any, label: int | None = None, data: Any = None) -> int:
        """Adds one record.

        Args:
            embedding: A `[dim]` embedding.
            label: Its integer class, or `None`. Defaults to `None`.
            data: Anything kept with it (the example itself). Defaults to
                `None`.

        Returns:
            The record's id.

        Raises:
            ValueError: If the embedding is not a 1-D array of finite numbers
                of the store's size, or the label is not an integer.
        """
        embedding = np.asarray(embedding)
        if embedding.ndim != 1:
            raise ValueError(
                f"{type(self).__name__}: add takes one embedding of shape [dim]; got shape "
                f"{list(embedding.shape)}. Use batch_add for several."
            )
        return self.batch_add(embedding[np.newaxis], [label], [data])[0]

    def batch_add(
        self,
        embeddings: Any,
        labels: Sequence[int | None] | None = None,
        data: Sequence[Any] | None = None,
    ) -> list[int]:
        """Adds one record per row of `embeddings`.

        Args:
            embeddings: `[n, dim]` embeddings.
            labels: `n` integer labels (or `None`s), or `None` for none.
                Defaults to `None`.
            data: `n` items, or `None` for none. Defaults to `None`.

        Returns:
            The `n` ids of the new records, consecutive.

        Raises:
            ValueError: If the embeddings are not `[n, dim]` finite numbers
                of the store's `dim`, or `labels` or `data` are not `n` long,
                or a label is not an integer or `None`.
        """
        embeddings = self._check_embeddings(embeddings)
        count = len(embeddings)
        labels_array, has_label = self._check_labels(labels, count)
        data_list = self._check_data(data, count)
        start = self.size()
        if count:
            self._add(embeddings, labels_array, has_label, data_list)
        return list(range(start, start + count))

    def get(self, idx: int) -> tuple[np.ndarray, int | None, Any]:
        """Returns the record `idx` as `(embedding, label, data)`.

        Raises:
            IndexError: If there is no record `idx`.
        """
        embeddings, labels, data = self.batch_get([idx])
        return embeddings[0], labels[0], data[0]

    def batch_get(self, idxs: Sequence[int]) -> tuple[np.ndarray, list[int | None], list[Any]]:
        """Returns the records `idxs` as `(embeddings [n, dim], labels, data)`.

        `labels` and `data` are lists of `n` items: an `int` or `None`, and
        what was stored or `None`.

        Raises:
            IndexError: If an id is not a record's.
        """
        idxs = self._check_idxs(idxs)
        return self._get(idxs)

    def __len__(self) -> int:
        return self.size()

    def to_data_frame(self, num_records: int = 0) -> Any:
        """Returns the first `num_records` records as a pandas `DataFrame`.

        Columns: `embeddings` (arrays), `labels`, `data`.

        Args:
            num_records: How many records; 0 (the default) for all.

        Raises:
            ImportError: If pandas is not installed.
        """
        num_records = check_int("num_records", num_records, minimum=0, owner=type(self).__name__)
        try:
            pandas = importlib.import_module("pandas")
        except ImportError as err:
            raise ImportError(
                f"{type(self).__name__}.to_data_frame needs pandas, which is not installed. "
                "Install it with: pip install pandas"
            ) from err
        count = self.size() if num_records == 0 else min(num_records, self.size())
        embeddings, labels, data = self._get(np.arange(count, dtype=np.int64))
        return pandas.DataFrame({"embeddings": list(embeddings), "labels": labels, "data": data})

    def save(self, path: Path | str, compression: bool = True) -> None:
        """Writes the records into the folder `path` (created if needed).

        Args:
            path: A folder; a search index may be saved into the same one.
            compression: Whether to compress. Defaults to True.
        """
        self._save(Path(path), compression)

    def load(self, path: Path | str, safe_mode: bool = True) -> int:
        """Replaces the records by those saved in the folder `path`.

        The file is read and checked completely first: on any error the store
        is left as it was.

        Args:
            path: The folder given to `save`.
            safe_mode: If `True` (the default), records whose data were
                saved as pickled Python objects are refused, since
                unpickling runs code the file names; `False` loads them (as
                `keras.saving.load_model(safe_mode=False)` does): only for
                files you trust.

        Returns:
            The number of records loaded.

        Raises:
            FileNotFoundError: If nothing was saved there.
            ValueError: If the file is corrupt, of another format version,
                or (in safe mode) holds pickled data.
        """
        self._load(Path(path), bool(safe_mode))
        return self.size()

    def saved_files(self, path: Path | str) -> dict[str, int | None]:
        """The files `save(path)` wrote into the folder `path`.

        `Indexer.save` records a checksum of each and `Indexer.load` verifies
        them before reading anything. A name maps to `None` when the whole
        file is saved content, or to how many of its first bytes are, for a
        file that is appended in place (a `MemmapStore`'s columns) and may
        grow past them without changing the saved records. Defaults to none;
        a subclass that saves files names them.

        Args:
            path: The folder given to `save`.
        """
        del path
        return {}

    def embedding_rows(self) -> np.ndarray:
        """All the records' embeddings, `[size(), dim]` float32, in id order, not copied.

        A view (or a read-only memory map) that the next change may
        invalidate: read it again after one. `LinearSearch` searches it
        (see `LinearSearch.share_rows`), so an `Indexer` holds its
        embeddings once.

        Raises:
            NotImplementedError: If the store cannot give its rows without
                a copy (then an `Indexer` keeps a second copy in its search).
        """
        raise NotImplementedError(f"{type(self).__name__} does not share its embedding rows.")

    def keep(self, mask: Any) -> None:
        """Keeps only the records where `mask` is true, renumbered `0, 1, ...` in order.

        What `Indexer.compact` does to the store once removed records are
        dropped.

        Args:
            mask: `size()` booleans.

        Raises:
            ValueError: If `mask` is not `size()` booleans.
        """
        mask = np.asarray(mask)
        if mask.shape != (self.size(),) or mask.dtype != bool:
            raise ValueError(
                f"{type(self).__name__}: keep takes one boolean per record ({self.size()}); "
                f"got {mask.dtype} of shape {list(mask.shape)}."
            )
        self._keep(mask)

    def _keep(self, mask: np.ndarray) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot drop records.")

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "verbose": self.verbose}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Store:
        return cls(**config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={self.size()})"

    # For subclasses.

    @property
    @abc.abstractmethod
    def dim(self) -> int | None:
        """The embedding size, `None` until the first record."""

    @abc.abstractmethod
    def size(self) -> int:
        """The number of records."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Removes every record."""

    @abc.abstractmethod
    def _add(
        self, embeddings: np.ndarray, labels: np.ndarray, has_label: np.ndarray, data: list[Any]
    ) -> None:
        """Appends checked records: float32 `[n, dim]`, int64 `[n]`, bool `[n]`, `n` items."""

    @abc.abstractmethod
    def _get(self, idxs: np.ndarray) -> tuple[np.ndarray, list[int | None], list[Any]]:
        """Returns the records of checked int64 ids."""

    @abc.abstractmethod
    def _save(self, path: Path, compression: bool) -> None:
        """Saves into the folder `path`."""

    @abc.abstractmethod
    def _load(self, path: Path, safe_mode: bool) -> None:
        """Loads from the folder `path`, reading and checking everything before any change.

        `safe_mode` is `load`'s: in safe mode nothing may be unpickled.
        """

    def _check_embeddings(self, embeddings: Any) -> np.ndarray:
        owner = type(self).__name__
        try:
            array = np.asarray(embeddings, dtype=np.float32)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{owner}: embeddings must be numbers ({err}).") from err
        dim = self.dim
        if array.ndim != 2 or (dim is not None and array.shape[1] != dim):
            wanted = "[n, dim]" if dim is None else f"[n, {dim}] (the store's embedding size)"
            raise ValueError(
                f"{owner}: embeddings must have shape {wanted}; got shape "
                f"{list(array.shape)}. Pass one row per record, all of one size."
            )
        if not np.isfinite(array).all():
            raise ValueError(f"{owner}: embeddings contain NaN or infinite values.")
        return array

    def _check_labels(self, labels: Any, count: int) -> tuple[np.ndarray, np.ndarray]:
        owner = type(self).__name__
        if labels is None:
            return np.zeros(count, np.int64), np.zeros(count, bool)
        if len(labels) != count:
            raise ValueError(
                f"{owner}: labels must hold one label per embedding: {count} embeddings but "
                f"{len(labels)} labels. Pass as many labels as embeddings, or labels=None."
            )
        array = np.asarray(labels)
        if np.issubdtype(array.dtype, np.integer) and array.ndim == 1:
            return array.astype(np.int64), np.ones(count, bool)
        values, has_label = np.zeros(count, np.int64), np.zeros(count, bool)
        for i, label in enumerate(labels):
            if label is None:
                continue
            if not is_int(label):
                raise ValueError(
                    f"{owner}: labels must be integers or None; labels[{i}] is {label!r}. Map "
                    "class names to integers first."
                )
            values[i], has_label[i] = int(label), True
        return values, has_label

    def _check_data(self, data: Any, count: int) -> list[Any]:
        if data is None:
            return [None] * count
        if len(data) != count:
            raise ValueError(
                f"{type(self).__name__}: data must hold one item per embedding: {count} "
                f"embeddings but {len(data)} items. Pass as many items as embeddings, or "
                "data=None."
            )
        return list(data)

    def _check_idxs(self, idxs: Any) -> np.ndarray:
        array = np.asarray(idxs)
        size = self.size()
        if array.ndim != 1 or (len(array) and not np.issubdtype(array.dtype, np.integer)):
            raise IndexError(
                f"{type(self).__name__}: idxs must be a list of integer record ids; got {idxs!r}."
            )
        array = array.astype(np.int64)
        bad = (array < 0) | (array >= size)
        if bad.any():
            raise IndexError(
                f"{type(self).__name__}: no record {int(array[bad][0])}; the store holds ids "
                f"0 to {size - 1}."
            )
        return array
