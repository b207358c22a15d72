"""The arrays an exported `lookup` holds: an index's keys, ids and labels, and their size limit.

An exported `lookup` searches the index exactly, in the graph, over these
arrays held as variables (see `SimilarityServing`); its TensorFlow Lite
conversion freezes them into `lookup.tflite`, a FlatBuffer, which cannot
exceed 2 GiB, and the class names are a constant in `saved_model.pb`, a
protocol buffer with the same limit. `MAX_INDEX_BYTES`, 1 GiB, keeps the
arrays to half of it, which leaves room for the network and the
converter's copies; a server also holds them in memory and scans them all
for each query. Past the limit an export saves the index beside the
SavedModel instead (`export_model`'s `index_location`), with its own
search (an on-disk or Milvus one, say), and `IndexServer` serves it.
`benchmark/serving_size.py` measures the SavedModel, its loading, the first
and later `lookup`s and the TFLite conversion up to the limit and past it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorflow_similarity.distances import Distance
from tensorflow_similarity.search import LinearSearch

# 1 GiB: half of the 2 GiB a protocol buffer (saved_model.pb) or a FlatBuffer (.tflite) can hold.
MAX_INDEX_BYTES = 2**30
# Per indexed item besides its embedding: the key's squared norm (float32), id and label (int64).
_BYTES_PER_ITEM = 4 + 8 + 8


@dataclasses.dataclass(frozen=True)
class IndexSnapshot:
    """An index as the arrays an exported `lookup` searches, in the index's order.

    Attributes:
        distance: The index's `Distance`.
        keys: `[m, dim]` float32 keys, as `LinearSearch.key_arrays` returns
            them (unit rows for cosine).
        key_norms: `[1, m]` float32 squared norms of `keys`.
        ids: `[m]` int64 item ids (`Lookup.id`; removed items left out).
        labels: `[m]` int64 labels, -1 for an item indexed without one.
        label_names: `[m]` class names (`bytes`): `class_names[label]`, or
            the label's digits when `class_names` has no such entry, `b""`
            for an item without a label.
    """

    distance: Distance
    keys: np.ndarray
    key_norms: np.ndarray
    ids: np.ndarray
    labels: np.ndarray
    label_names: np.ndarray

    @property
    def size(self) -> int:
        """The number of indexed items."""
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        """The bytes of the arrays the exported graph holds."""
        names = sum(len(name) for name in self.label_names.tolist())
        arrays = (self.keys, self.key_norms, self.ids, self.labels)
        return sum(array.nbytes for array in arrays) + names


def index_bytes(size: int, dim: int, names: int = 0) -> int:
    """The bytes an exported `lookup` holds for `size` embeddings of `dim` and `names` bytes."""
    return size * (4 * dim + _BYTES_PER_ITEM) + names


def check_index_size(size: int, dim: int, max_bytes: int = MAX_INDEX_BYTES, names: int = 0) -> None:
    """Raises `ValueError` if an index of `size` embeddings of `dim` is too large to export.

    Args:
        size: Indexed items.
        dim: Their embedding size.
        max_bytes: The limit. Defaults to `MAX_INDEX_BYTES` (1 GiB).
        names: The bytes of their class names, when known.
    """
    needed = index_bytes(size, dim, names)
    if needed <= max_bytes:
        return
    raise ValueError(
        f"The index holds {size} embeddings of size {dim}: {needed / 2**20:.1f} MiB in the "
        f"exported model, over the limit of {max_bytes / 2**20:.0f} MiB "
        "(tensorflow_similarity.serving.MAX_INDEX_BYTES): an exported lookup holds the whole "
        "index in memory and scans it for every query, and its TensorFlow Lite file cannot "
        "hold it past 2 GiB (max_index_bytes raises the limit for an export without "
        "TFLite). Export it with index_location='external' (tfsim export --index-location "
        "external) to save the index beside the SavedModel and serve lookup with "
        "tensorflow_similarity.serving.IndexServer, or export the model without its index "
        "(include_index=False)."
    )


def snapshot_index(
    index: Any, class_names: Sequence[str] | None = None, max_bytes: int = MAX_INDEX_BYTES
) -> IndexSnapshot:
    """Returns the arrays of `index` (an `Indexer`) that an exported `lookup` searches.

    The keys of a `LinearSearch` are taken as they are, so the exported
    search compares with the same bits as `model.lookup`; another search
    (faiss) is searched exactly over the store's embeddings, as a
    `LinearSearch` of them would.

    Args:
        index: A non-empty `Indexer`.
        class_names: The names of the classes, by label. Defaults to none
            (each label's digits).
        max_bytes: The size limit. Defaults to `MAX_INDEX_BYTES`.

    Raises:
        ValueError: If the arrays exceed `max_bytes` (checked before any is read).
    """
    size, dim = index.size(), index.embedding_size
    check_index_size(size, dim, max_bytes)
    search = index.search
    if isinstance(search, LinearSearch):
        ids = np.array(search.ids(), np.int64)
    else:
        ids = np.asarray(index.ids(), np.int64)
        search = LinearSearch(index.distance, dim=dim)
        search.batch_add(index.batch_get(ids)[0], ids)
    keys, key_norms = search.key_arrays()
    _, stored_labels, _ = index.batch_get(ids)
    names = list(class_names or [])
    labels = np.array([-1 if label is None else int(label) for label in stored_labels], np.int64)
    label_names = np.array(
        [
            b"" if label < 0 else (names[label] if label < len(names) else str(label)).encode()
            for label in labels.tolist()
        ],
        dtype=object,
    )
    snapshot = IndexSnapshot(index.distance, keys, key_norms, ids, labels, label_names)
    check_index_size(size, dim, max_bytes, sum(len(n) for n in label_names.tolist()))
    return snapshot
