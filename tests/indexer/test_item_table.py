"""`ItemTable.rows_of`: the row of each id, found in place while the ids increase."""

from __future__ import annotations

import tracemalloc

import numpy as np

from tensorflow_similarity.indexer.lifecycle import ItemTable
from tensorflow_similarity.search.row_ids import RowIds


def _reference(table, ids):
    """The alive row of each id by a plain loop, -1 for none."""
    pairs = enumerate(zip(table.ids(), table.alive(), strict=True))
    rows = {int(i): row for row, (i, alive) in pairs if alive}
    return np.array([rows.get(int(i), -1) for i in ids], np.int64)


def test_rows_of_equals_a_loop_through_adds_removals_upserts_compaction_and_load():
    rng = np.random.default_rng(0)
    table = ItemTable()
    for step in range(40):
        action = rng.integers(0, 5)
        if action <= 1 or not table.alive_count:
            table.assign(int(rng.integers(0, 6)))
        elif action == 2:
            alive = np.flatnonzero(table.alive())
            table.kill(rng.choice(alive, size=min(2, len(alive)), replace=False))
        elif action == 3 and step > 20:
            # An upsert: an alive id moves to a new row at the end, out of order.
            row = int(rng.choice(np.flatnonzero(table.alive())))
            table.kill(np.array([row]))
            table.append(table.ids()[row : row + 1].copy())
        elif action == 3:
            table.keep(table.alive().copy())
        else:
            again = ItemTable()
            again.replace(table.ids().copy(), table.alive().copy())
            again.next_id = table.next_id
            table = again
        queries = np.arange(-1, table.next_id + 2, dtype=np.int64)
        np.testing.assert_array_equal(table.rows_of(queries), _reference(table, queries))
        np.testing.assert_array_equal(table.rows_of(queries), RowIds.rows_of(table, queries))


def test_rows_of_a_large_table_copies_nothing_of_it():
    table = ItemTable()
    table.assign(1_000_000)
    table.kill(np.arange(0, 1_000_000, 7))
    queries = np.random.default_rng(1).integers(0, 1_000_000, 640)
    tracemalloc.start()
    try:
        rows = table.rows_of(queries)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(rows, np.where(queries % 7 == 0, -1, queries))
    # The table is 9 MB; a lookup's 640 ids need a few kilobytes.
    assert peak < 100_000, peak
