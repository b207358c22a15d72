"""The ids of a search's rows and which rows are removed (tombstones)."""

from __future__ import annotations

import numpy as np

from tensorflow_similarity.stores.growing_array import GrowingArray


class RowIds:
    """Per row of an index, the id it was added under and whether it is still alive.

    A search that cannot delete a row at once (a graph, a buffer others
    read) marks it removed here, a tombstone; lookups leave tombstoned rows
    out, and `compact` drops them. Ids of alive rows are unique.
    """

    def __init__(self) -> None:
        self._ids = GrowingArray((), np.int64)
        self._alive = GrowingArray((), bool)
        self.dead = 0

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def alive_count(self) -> int:
        return len(self._ids) - self.dead

    def extend(self, ids: np.ndarray) -> None:
        self._ids.extend(ids)
        self._alive.extend(np.ones(len(ids), bool))

    def ids(self) -> np.ndarray:
        """Every row's id, removed rows' too (a view)."""
        return self._ids.view()

    def alive(self) -> np.ndarray:
        """Whether each row is alive (a view)."""
        return self._alive.view()

    def alive_ids(self) -> np.ndarray:
        """The alive rows' ids, in row order (a copy)."""
        return self._ids.view()[self._alive.view()]

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """The alive row of each id in `ids`, -1 for an id no alive row has."""
        alive_rows = np.flatnonzero(self._alive.view())
        alive_ids = self._ids.view()[alive_rows]
        order = np.argsort(alive_ids, kind="stable")
        sorted_ids = alive_ids[order]
        found = np.searchsorted(sorted_ids, ids)
        found = np.minimum(found, max(len(sorted_ids) - 1, 0))
        hit = (len(sorted_ids) > 0) & (sorted_ids[found] == ids) if len(sorted_ids) else None
        if hit is None:
            return np.full(len(ids), -1, np.int64)
        return np.where(hit, alive_rows[order[found]], -1).astype(np.int64)

    def kill(self, rows: np.ndarray) -> None:
        """Marks alive `rows` removed."""
        self._alive.view()[rows] = False
        self.dead += len(rows)

    def keep(self, mask: np.ndarray) -> None:
        """Keeps only the rows where `mask` is true, in order."""
        ids, alive = self._ids.view()[mask], self._alive.view()[mask]
        self._ids.replace(ids)
        self._alive.replace(alive)
        self.dead = int(len(alive) - alive.sum())

    def replace(self, ids: np.ndarray, alive: np.ndarray) -> None:
        self._ids.replace(np.array(ids, np.int64))
        self._alive.replace(np.array(alive, bool))
        self.dead = int(len(alive) - np.count_nonzero(alive))

    def clear(self) -> None:
        self._ids.clear()
        self._alive.clear()
        self.dead = 0
