"""The saved format works on a plain `SavedIndex` record and knows nothing of `Indexer`."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import tensorflow_similarity.indexer.persistence as persistence_module
from tensorflow_similarity.distances import distance_canonicalizer
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.indexer.lifecycle import ItemTable, share_rows
from tensorflow_similarity.indexer.persistence import read_index, save_index
from tensorflow_similarity.indexer.saved_index import SavedIndex
from tensorflow_similarity.search import LinearSearch
from tensorflow_similarity.stores import MemoryStore

DIM = 3


def _data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, DIM)).astype(np.float32), rng.integers(0, 3, size=n)


def _nearest(query, keys, k):
    """Float64 loops: the `k` nearest keys of `query` in L2, as (rows, distances)."""
    distances = []
    for key in keys.astype(np.float64):
        distances.append(
            np.sqrt(sum((float(q) - float(c)) ** 2 for q, c in zip(query, key, strict=True)))
        )
    order = sorted(range(len(keys)), key=lambda i: distances[i])[:k]
    return order, [distances[i] for i in order]


def test_persistence_imports_nothing_from_the_indexer_module():
    tree = ast.parse(Path(persistence_module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
            imported.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert "tensorflow_similarity.indexer.indexer" not in imported
    assert "tensorflow_similarity.indexer.Indexer" not in imported


def test_read_index_returns_the_saved_record_and_load_builds_the_same_index(tmp_path):
    x, y = _data()
    index = Indexer(embedding_size=DIM, distance="l2")
    index.batch_add(x, labels=y, verbose=0)
    index.remove([2, 5])
    index.embedding_fingerprint = "ab" * 32
    index.calibrate(x[:4] + 0.01, y[:4], thresholds_targets={}, verbose=0)
    index.save(tmp_path / "index")

    saved = read_index(tmp_path / "index", verbose=0)

    assert isinstance(saved, SavedIndex)
    assert saved.size == 6 and saved.items.next_id == 8
    np.testing.assert_array_equal(saved.items.alive_ids(), [0, 1, 3, 4, 6, 7])
    np.testing.assert_array_equal(saved.search.ids(), [0, 1, 3, 4, 6, 7])
    np.testing.assert_array_equal(saved.kv_store.embedding_rows(), x)
    assert (saved.distance.name, saved.embedding_size) == ("euclidean", DIM)
    assert saved.embedding_fingerprint == "ab" * 32
    assert saved.is_calibrated and saved.cutpoints == index.cutpoints
    loaded = Indexer.from_saved_index(saved)
    assert loaded.search is saved.search and loaded.kv_store is saved.kv_store
    queries = x[:3] + 0.1
    for got, want in zip(
        loaded.batch_lookup(queries, k=3, verbose=0),
        index.batch_lookup(queries, k=3, verbose=0),
        strict=True,
    ):
        assert [(r.id, r.label, r.distance) for r in got] == [
            (r.id, r.label, r.distance) for r in want
        ]


def test_a_record_built_without_an_indexer_saves_and_loads(tmp_path):
    x, y = _data(n=6, seed=1)
    search, store, items = LinearSearch("l2", DIM), MemoryStore(), ItemTable()
    share_rows(search, store)
    store.batch_add(x, y.tolist(), [None] * len(x))
    search.batch_add(x, items.assign(len(x)))
    record = SavedIndex(
        embedding_size=DIM,
        distance=distance_canonicalizer("l2"),
        search=search,
        kv_store=store,
        items=items,
        evaluator="memory",
        embedding_output=None,
        stat_buffer_size=10,
    )

    save_index(record, tmp_path / "index")
    index = Indexer.load(tmp_path / "index", verbose=0)

    assert index.size() == 6 and index.stat_buffer_size == 10
    query = x[0] + 0.3
    rows, distances = _nearest(query, x, k=4)
    lookups = index.single_lookup(query, k=4)
    assert [r.id for r in lookups] == rows
    assert [r.label for r in lookups] == y[rows].tolist()
    np.testing.assert_allclose([r.distance for r in lookups], distances, rtol=1e-5)
