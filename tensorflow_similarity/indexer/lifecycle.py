"""The items of an `Indexer`: their stable ids, and removing, replacing and compacting them.

Every item added to an `Indexer` gets an id, an int64 from a counter
that only grows (saved with the index), so an id is never given to
another item, whatever is removed, compacted, saved or loaded. The store
keeps the records in rows, and `ItemTable` maps each row to its item's
id and says whether the row is still alive: `remove` and `upsert` only
mark rows removed (the store appends the new rows of an upsert), and
`compact` drops the removed rows from the store and the search at once.
The search holds the items' ids, so lookups return ids that the table
turns into rows of the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tensorflow_similarity._validation import is_int
from tensorflow_similarity.search import LinearSearch, Search
from tensorflow_similarity.search.row_ids import RowIds
from tensorflow_similarity.stores import Store

if TYPE_CHECKING:
    from tensorflow_similarity.indexer.indexer import Indexer


class ItemTable(RowIds):
    """Per row of an index's store, its item's id and whether it is alive; the next id.

    Rows added by `assign` only (and kept by `compact`) have increasing
    ids, which `rows_of` finds by a binary search of the ids in place;
    once an upsert appends an older id, it sorts the alive ids, a copy of
    the table per call, as `RowIds` does.
    """

    def __init__(self) -> None:
        super().__init__()
        self.next_id = 0
        self._increasing = True

    def assign(self, count: int) -> np.ndarray:
        """Appends `count` rows under new ids, returned."""
        ids = np.arange(self.next_id, self.next_id + count, dtype=np.int64)
        self.append(ids)
        return ids

    def append(self, ids: np.ndarray) -> None:
        """Appends rows under the given ids (distinct, none alive)."""
        if len(ids):
            last = self.ids()[-1] if len(self) else -1
            self._increasing = self._increasing and _increasing(ids) and ids[0] > last
        self.extend(ids)
        if len(ids):
            self.next_id = max(self.next_id, int(ids.max()) + 1)

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        if not self._increasing:
            return super().rows_of(ids)
        ids = np.asarray(ids, np.int64)
        all_ids, alive = self.ids(), self.alive()
        if not len(all_ids):
            return np.full(len(ids), -1, np.int64)
        found = np.minimum(np.searchsorted(all_ids, ids), len(all_ids) - 1)
        return np.where((all_ids[found] == ids) & alive[found], found, -1).astype(np.int64)

    def replace(self, ids: np.ndarray, alive: np.ndarray) -> None:
        super().replace(ids, alive)
        self._increasing = _increasing(self.ids())

    def clear(self) -> None:
        super().clear()
        self.next_id = 0
        self._increasing = True


def _increasing(ids: np.ndarray) -> bool:
    return bool(np.all(ids[1:] > ids[:-1]))


def check_item_ids(ids: Any, what: str, *, count: int | None = None) -> np.ndarray:
    """`ids` as distinct non-negative int64 ids, or a `ValueError` saying what is wrong."""
    array = np.asarray(ids)
    if array.ndim == 0:
        array = array.reshape(1)
    if array.ndim != 1 or not (len(array) == 0 or all(is_int(i) for i in array.tolist())):
        raise ValueError(
            f"Indexer.{what}: ids must be a list of integer item ids (Lookup.id, or the ids "
            f"Indexer.ids() lists); got {ids!r}."
        )
    array = array.astype(np.int64)
    if count is not None and len(array) != count:
        raise ValueError(
            f"Indexer.{what}: {len(array)} ids for {count} embeddings; pass one id per embedding."
        )
    if (array < 0).any():
        raise ValueError(f"Indexer.{what}: ids are non-negative; got {int(array[array < 0][0])}.")
    unique, counts = np.unique(array, return_counts=True)
    if (counts > 1).any():
        raise ValueError(
            f"Indexer.{what}: the id {int(unique[counts > 1][0])} is given "
            f"{int(counts.max())} times; pass each id once."
        )
    return array


def remove_items(index: Indexer, ids: Any) -> None:
    """Removes the items `ids` from `index` (see `Indexer.remove`)."""
    ids = check_item_ids(ids, "remove")
    rows = index._items.rows_of(ids)
    if (rows < 0).any():
        missing = ids[rows < 0]
        raise ValueError(
            f"Indexer.remove: no item has the id {int(missing[0])} ({len(missing)} of the "
            f"{len(ids)} ids are not in the index: never added, or removed already); nothing "
            "was removed. Pass ids of indexed items (Indexer.ids())."
        )
    if not len(ids):
        return
    index.search.remove(ids)
    index._items.kill(rows)


def upsert_items(index: Indexer, ids: Any, embeddings: np.ndarray, labels: Any, data: Any) -> None:
    """Puts checked `embeddings` under `ids` in `index` (see `Indexer.upsert`)."""
    ids = check_item_ids(ids, "upsert", count=len(embeddings))
    if not len(ids):
        return
    old_rows = index._items.rows_of(ids)
    index.kv_store.batch_add(embeddings, labels, data)
    index.search.upsert(embeddings, ids)
    index._items.kill(old_rows[old_rows >= 0])
    index._items.append(ids)


def compact_items(index: Indexer) -> None:
    """Drops the removed rows of `index`'s store and search (see `Indexer.compact`)."""
    keep = index._items.alive().copy()
    if not keep.all():
        index.kv_store.keep(keep)
    index.search.compact()
    index._items.keep(keep)


def share_store_rows(index: Indexer) -> None:
    """Makes a `LinearSearch` of `index` read its store's embeddings: see `share_rows`."""
    share_rows(index.search, index.kv_store)


def share_rows(search: Search, store: Store) -> None:
    """Makes a `LinearSearch` read `store`'s embeddings: one copy, not two.

    The search is emptied first. A store that cannot give its rows without
    a copy (a `Store` subclass of yours) leaves the search its own copy;
    another search keeps its own.
    """
    if not isinstance(search, LinearSearch):
        return
    search.reset()
    if type(store).embedding_rows is Store.embedding_rows:
        search.share_rows(None)
    else:
        search.share_rows(store.embedding_rows)
