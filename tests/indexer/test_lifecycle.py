"""Remove, upsert and compact against a plain reference: exact search over the survivors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.search import FaissSearch, LinearSearch
from tensorflow_similarity.serving.index_snapshot import snapshot_index
from tensorflow_similarity.stores import MemmapStore
from tensorflow_similarity.types import Lookup

DIM = 6


def _reference(items: dict[int, tuple[np.ndarray, int]], queries: np.ndarray, k: int, distance):
    """Per query, the `(id, distance)` of its `k` nearest items, by float64 loops."""
    answers = []
    for query in queries.astype(np.float64):
        scored = []
        for item_id, (embedding, _) in items.items():
            key = embedding.astype(np.float64)
            if distance == "cosine":
                value = 1.0 - query @ key / (np.linalg.norm(query) * np.linalg.norm(key))
            else:
                value = float(np.sqrt(np.sum((query - key) ** 2)))
            scored.append((value, item_id))
        scored.sort()
        answers.append([(item_id, value) for value, item_id in scored[:k]])
    return answers


def _backend(name, distance, tmp_path):
    if name == "linear":
        return {"search": LinearSearch(distance, dim=DIM)}
    if name == "linear-memmap":
        return {"search": "linear", "kv_store": MemmapStore(tmp_path / "live")}
    pytest.importorskip("faiss")
    algo = name.split("-")[1]
    return {"search": FaissSearch(distance, dim=DIM, algo=algo, ef_search=64)}


def _check(index, items, rng, distance, seen_ids):
    queries = rng.normal(size=(3, DIM)).astype(np.float32)
    assert index.size() == len(items)
    assert sorted(index.ids().tolist()) == sorted(items)
    if not items:
        return
    k = min(5, len(items))
    got = index.batch_lookup(queries, k=k, verbose=0)
    for lookups, want in zip(got, _reference(items, queries, k, distance), strict=True):
        assert [n.id for n in lookups] == [item_id for item_id, _ in want]
        np.testing.assert_allclose(
            [n.distance for n in lookups], [value for _, value in want], rtol=1e-4, atol=2e-5
        )
        for n in lookups:
            np.testing.assert_array_equal(n.embedding, items[n.id][0])
            assert n.label == items[n.id][1]
    assert set(items) <= seen_ids


@pytest.mark.parametrize(
    "backend, distance",
    [
        ("linear", "cosine"),
        ("linear", "euclidean"),
        ("linear-memmap", "cosine"),
        ("faiss-flat", "euclidean"),
        ("faiss-flat", "cosine"),
        ("faiss-hnsw", "euclidean"),
    ],
)
def test_random_lifecycle_matches_exact_search_over_the_survivors(tmp_path, backend, distance):
    rng = np.random.default_rng(hash((backend, distance)) % 2**32)
    index = Indexer(embedding_size=DIM, distance=distance, **_backend(backend, distance, tmp_path))
    items: dict[int, tuple[np.ndarray, int]] = {}
    seen_ids: set[int] = set()
    ops = ["add", "add", "remove", "upsert", "save", "compact"] * 6
    rng.shuffle(ops)
    for step, op in enumerate(["add", *ops]):
        alive = sorted(items)
        if op == "add" or (op in ("remove", "upsert") and not alive):
            rows = rng.normal(size=(int(rng.integers(1, 7)), DIM)).astype(np.float32)
            labels = rng.integers(0, 4, size=len(rows)).tolist()
            index.batch_add(rows, labels=labels, verbose=0)
            new_ids = index.ids()[-len(rows) :].tolist()
            # A new item never gets an id seen before, whatever was removed.
            assert not set(new_ids) & seen_ids
            seen_ids.update(new_ids)
            items.update(zip(new_ids, zip(rows, labels, strict=True), strict=True))
        elif op == "remove":
            gone = rng.choice(alive, size=min(len(alive), int(rng.integers(1, 4))), replace=False)
            index.remove(gone.tolist())
            for item_id in gone.tolist():
                del items[item_id]
        elif op == "upsert":
            replaced = rng.choice(alive, size=min(len(alive), 2), replace=False).tolist()
            added = [max(seen_ids) + 3]
            ids = [*replaced, *added]
            rows = rng.normal(size=(len(ids), DIM)).astype(np.float32)
            labels = [7] * len(ids)
            index.upsert(ids, rows, labels=labels)
            seen_ids.update(ids)
            items.update(zip(ids, zip(rows, labels, strict=True), strict=True))
        elif op == "save":
            index.save(tmp_path / f"saved-{step}")
            index = Indexer.load(tmp_path / f"saved-{step}", verbose=0)
        else:
            index.compact()
        _check(index, items, rng, distance, seen_ids)


def test_ivfpq_never_returns_a_removed_item_and_compacts_in_place(tmp_path):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(3)
    search = FaissSearch("euclidean", dim=8, algo="ivfpq", nlist=4, nprobe=4, m=2, nbits=4)
    index = Indexer(embedding_size=8, distance="euclidean", search=search)
    rows = rng.normal(size=(64, 8)).astype(np.float32)
    index.batch_add(rows, labels=np.arange(64) % 3, verbose=0)
    removed = list(range(0, 64, 3))
    index.remove(removed)
    before = index.batch_lookup(rows[:10], k=8, verbose=0)
    assert all(n.id not in removed for row in before for n in row)
    index.compact()
    assert index.batch_lookup(rows[:10], k=8, verbose=0) == before
    index.save(tmp_path / "ivf")
    assert Indexer.load(tmp_path / "ivf", verbose=0).batch_lookup(rows[:10], k=8, verbose=0) == (
        before
    )


def test_bad_lifecycle_calls_are_refused_and_change_nothing():
    index = Indexer(embedding_size=2, distance="l2")
    index.batch_add(np.eye(2), labels=[0, 1], verbose=0)
    with pytest.raises(ValueError, match="no item has the id 5"):
        index.remove([0, 5])
    with pytest.raises(ValueError, match="the id 1 is given 2 times"):
        index.remove([1, 1])
    with pytest.raises(ValueError, match="ids are non-negative"):
        index.upsert([-1], np.ones((1, 2)))
    with pytest.raises(ValueError, match="2 ids for 1 embeddings"):
        index.upsert([0, 1], np.ones((1, 2)))
    assert index.size() == 2 and index.ids().tolist() == [0, 1]
    index.remove([0])
    with pytest.raises(ValueError, match="no item has the id 0"):
        index.remove([0])


def test_the_linear_index_keeps_one_copy_of_the_embeddings(tmp_path):
    index = Indexer(embedding_size=DIM)
    index.batch_add(np.ones((4, DIM)), verbose=0)
    store_rows = index.kv_store.embedding_rows()
    assert np.shares_memory(index.search._rows(), store_rows)
    index.save(tmp_path / "one")
    files = {p.name for p in (tmp_path / "one").iterdir()}
    # The rows are saved raw once, by the store; the search saves its ids.
    assert "memory_store_embeddings.npy" in files and "linear_search_embeddings.npy" not in files
    loaded = Indexer.load(tmp_path / "one", verbose=0)
    assert np.shares_memory(loaded.search._rows(), loaded.kv_store.embedding_rows())


def test_a_lookup_of_0_17_still_builds_and_compares():
    assert Lookup(rank=1, distance=0.5, label=2) == Lookup(1, 0.5, 2)
    assert Lookup(rank=1, distance=0.5).id is None


@pytest.mark.parametrize("search", ["linear", "faiss"])
def test_an_index_saved_by_format_version_2_loads_and_lives_on(tmp_path, search):
    """tests/indexer/data/index_v2_*: saved by the code before format 3 (seeded, as below)."""
    if search == "faiss":
        pytest.importorskip("faiss")
    saved = Path(__file__).parent / "data" / f"index_v2_{search}"
    assert Indexer.read_metadata(saved)["format_version"] == 2
    x = np.random.default_rng(47).normal(size=(12, 4)).astype(np.float32)
    items = {i: (x[i], i % 3) for i in range(12)}
    index = Indexer.load(saved, verbose=0)
    assert index.ids().tolist() == list(range(12))
    queries = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    for lookups, want in zip(
        index.batch_lookup(queries, k=4, verbose=0),
        _reference(items, queries, 4, "cosine"),
        strict=True,
    ):
        assert [n.id for n in lookups] == [item_id for item_id, _ in want]
        assert [n.data for n in lookups] == [f"item{item_id}" for item_id, _ in want]
        np.testing.assert_allclose([n.distance for n in lookups], [d for _, d in want], atol=1e-5)
    index.remove([0])
    index.batch_add(x[:1], labels=[0], data=["again"], verbose=0)
    assert index.ids().tolist()[-1] == 12
    index.save(tmp_path / "v3")
    assert Indexer.read_metadata(tmp_path / "v3")["format_version"] == 3
    assert Indexer.load(tmp_path / "v3", verbose=0).ids().tolist() == [*range(1, 12), 12]


def test_to_data_frame_leaves_removed_items_out():
    pytest.importorskip("pandas")
    index = Indexer(embedding_size=2, distance="l2")
    index.batch_add(np.arange(8.0).reshape(4, 2), labels=[0, 1, 2, 3], verbose=0)
    index.remove([1])
    assert index.to_data_frame()["labels"].tolist() == [0, 2, 3]
    assert index.to_data_frame(2)["labels"].tolist() == [0, 2]


@pytest.mark.parametrize("kv_store", ["memory", "memmap"])
def test_a_reader_keeps_the_state_it_loaded_while_a_writer_saves_over_it(tmp_path, kv_store):
    path = tmp_path / "index"
    store = MemmapStore(tmp_path / "live") if kv_store == "memmap" else "memory"
    writer = Indexer(embedding_size=DIM, distance="l2", kv_store=store)
    rows = np.random.default_rng(5).normal(size=(30, DIM)).astype(np.float32)
    writer.batch_add(rows, labels=np.arange(30), verbose=0)
    writer.save(path)
    before = Indexer.load(path, verbose=0).batch_lookup(rows[:4], k=3, verbose=0)
    reader = Indexer.load(path, verbose=0)  # not read from before the writer saves
    writer.remove([0, 1, 2, 3])
    writer.upsert([4], rows[:1] + 10, labels=[99])
    writer.compact()
    writer.save(path)
    assert reader.batch_lookup(rows[:4], k=3, verbose=0) == before
    reader.batch_add(rows[:1], labels=[0], verbose=0)  # copies what it loaded, not the new save
    assert reader.size() == 31 and reader.batch_get([0])[1] == [0]
    assert Indexer.load(path, verbose=0).ids().tolist() == list(range(5, 30)) + [4]


@pytest.mark.parametrize("search", ["linear", "faiss"])
def test_the_served_snapshot_leaves_removed_items_out(search):
    if search == "faiss":
        pytest.importorskip("faiss")
    index = Indexer(embedding_size=2, distance="l2", search=search)
    rows = np.arange(10.0).reshape(5, 2)
    index.batch_add(rows, labels=[10, 11, 12, 13, 14], verbose=0)
    index.remove([1, 3])
    index.upsert([0], rows[:1] + 0.5, labels=[20])
    snapshot = snapshot_index(index)
    assert snapshot.ids.tolist() == [2, 4, 0]
    assert snapshot.labels.tolist() == [12, 14, 20]
    np.testing.assert_array_equal(snapshot.keys, [rows[2], rows[4], rows[0] + 0.5])
