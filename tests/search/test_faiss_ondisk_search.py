"""FaissOnDiskSearch: exact with every list probed, recall, files, remove, bounded memory."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tensorflow_similarity.search import FaissOnDiskSearch, make_search
from tests.search.references import knn_loop

pytest.importorskip("faiss")

DISTANCES = ["cosine", "inner_product", "euclidean", "squared_euclidean"]


def clustered(rng, count, dim=8, clusters=20):
    centres = rng.normal(size=(clusters, dim))
    return centres[rng.integers(0, clusters, count)] + rng.normal(scale=0.2, size=(count, dim))


@pytest.mark.parametrize("distance", DISTANCES)
def test_every_list_probed_is_exact(distance):
    # 300 embeddings, the first 120 train 6 cells: both the held and the streamed rows.
    rng = np.random.default_rng(0)
    keys, queries = rng.normal(size=(300, 6)), rng.normal(size=(9, 6))
    ids = rng.permutation(3000)[:300]
    search = FaissOnDiskSearch(distance, dim=6, nlist=6, nprobe=6, train_size=120)
    search.batch_add(keys[:100], ids[:100])
    assert not search.is_built()
    search.batch_add(keys[100:], ids[100:])
    assert search.is_built()
    idxs, distances = search.batch_lookup(queries, k=5)
    want_ids, want_distances = knn_loop(distance, queries, keys, ids, 5)
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=1e-4, atol=1e-4)


def test_exact_before_training():
    rng = np.random.default_rng(1)
    keys, queries = rng.normal(size=(40, 4)), rng.normal(size=(3, 4))
    search = FaissOnDiskSearch("euclidean", dim=4, nlist=8, nprobe=1)
    search.batch_add(keys, np.arange(40) + 7)
    assert not search.is_built()
    want_ids, want_distances = knn_loop("euclidean", queries, keys, np.arange(40) + 7, 4)
    idxs, distances = search.batch_lookup(queries, k=4)
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=1e-5)


def test_recall_on_clustered_embeddings():
    rng = np.random.default_rng(2)
    keys, queries = clustered(rng, 4000), clustered(rng, 100)
    search = FaissOnDiskSearch("cosine", dim=8, nlist=64, nprobe=16, train_size=2000)
    search.batch_add(keys, np.arange(4000))
    assert search.is_built()
    found = search.batch_lookup(queries, k=10)[0]
    # float64 NumPy reference: the nearest by cosine are the largest normalised products.
    unit_keys = keys / np.linalg.norm(keys, axis=1, keepdims=True)
    unit_queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    exact = np.argsort(-(unit_queries @ unit_keys.T), axis=1, kind="stable")[:, :10]
    recall = np.mean([len(set(f) & set(e)) / 10 for f, e in zip(found, exact, strict=True)])
    assert recall >= 0.95


def folder_digest(path):
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(path.iterdir())}


def test_save_then_load_maps_the_files_and_leaves_them_unchanged(tmp_path):
    rng = np.random.default_rng(3)
    keys, queries = rng.normal(size=(500, 8)), rng.normal(size=(20, 8))
    search = FaissOnDiskSearch("l2", dim=8, nlist=8, nprobe=3, train_size=200)
    search.batch_add(keys, np.arange(500) * 2)
    search.remove([0, 2])
    search.save(tmp_path / "saved")
    assert sorted(f.name for f in (tmp_path / "saved").iterdir()) == sorted(search.saved_files())
    digest = folder_digest(tmp_path / "saved")
    loaded = FaissOnDiskSearch("l2", dim=8, nlist=8, nprobe=3)
    loaded.load(tmp_path / "saved")
    assert loaded.size() == 498
    for got, want in zip(
        loaded.batch_lookup(queries, 10), search.batch_lookup(queries, 10), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    # Changing the loaded index works on its own copy of the files.
    loaded.batch_add(keys[:5] + 100, [5001, 5002, 5003, 5004, 5005])
    loaded.remove([4])
    loaded.compact()
    assert loaded.size() == 502
    assert loaded.lookup(keys[0] + 100, k=1)[0].tolist() == [5001]
    assert folder_digest(tmp_path / "saved") == digest
    again = FaissOnDiskSearch("l2", dim=8, nlist=8, nprobe=3)
    again.load(tmp_path / "saved")
    np.testing.assert_array_equal(again.ids(), np.arange(2, 500) * 2)


def test_load_refuses_another_dim(tmp_path):
    search = FaissOnDiskSearch("l2", dim=4, nlist=2, train_size=2)
    search.batch_add(np.eye(4), [0, 1, 2, 3])
    search.save(tmp_path)
    other = FaissOnDiskSearch("l2", dim=5, nlist=2)
    with pytest.raises(ValueError, match="dim"):
        other.load(tmp_path)


@pytest.mark.parametrize("trained", [False, True])
def test_remove_upsert_and_compact(trained, tmp_path):
    rng = np.random.default_rng(4)
    keys = rng.normal(size=(300, 8))
    ids = np.arange(300) + 1000
    search = FaissOnDiskSearch("l2", dim=8, nlist=4, nprobe=4, train_size=100 if trained else 400)
    search.batch_add(keys, ids)
    assert search.is_built() == trained
    search.remove([1000, 1005])
    assert search.size() == 298
    found = search.batch_lookup(keys[[0, 5]], k=298)[0]
    assert not np.isin([1000, 1005], found).any()
    with pytest.raises(ValueError, match="1000"):
        search.remove([1000])
    search.upsert(keys[:2] + 50, [1001, 7])
    assert search.size() == 299
    assert search.lookup(keys[0] + 50, k=1)[0].tolist() == [1001]
    assert search.lookup(keys[1] + 50, k=1)[0].tolist() == [7]
    before = search.batch_lookup(keys[:30], k=10)
    search.compact()
    for got, want in zip(search.batch_lookup(keys[:30], k=10), before, strict=True):
        np.testing.assert_array_equal(got, want)
    want_ids = np.concatenate([np.delete(ids, [0, 1, 5]), [1001, 7]])
    np.testing.assert_array_equal(search.ids(), want_ids)
    reference = knn_loop(
        "euclidean", keys[10:13], np.delete(keys, [0, 1, 5], 0), np.delete(ids, [0, 1, 5]), 3
    )[0]
    np.testing.assert_array_equal(search.batch_lookup(keys[10:13], k=3)[0], reference)
    search.save(tmp_path)
    loaded = FaissOnDiskSearch("l2", dim=8, nlist=4, nprobe=4)
    loaded.load(tmp_path)
    np.testing.assert_array_equal(loaded.batch_lookup(keys[10:13], k=3)[0], reference)


def test_registered_and_config_round_trip():
    search = make_search("faiss_ondisk", "cosine", 8, nlist=16, nprobe=4)
    assert isinstance(search, FaissOnDiskSearch)
    again = FaissOnDiskSearch.from_config(search.get_config())
    assert (again.nlist, again.nprobe, again.train_size) == (16, 4, 640)
    assert again.page_budget == 256 << 20
    assert again.directory != search.directory
    small = FaissOnDiskSearch.from_config({**search.get_config(), "page_budget": 1 << 20})
    assert small.page_budget == 1 << 20


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"distance": "manhattan"}, "manhattan"),
        ({"nlist": 4, "nprobe": 5}, "nprobe=5"),
        ({"nlist": 8, "train_size": 7}, "train_size"),
        ({"page_budget": 4096}, "page_budget"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FaissOnDiskSearch(**{"distance": "l2", "dim": 4, **kwargs})


MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from tensorflow_similarity.indexer import Indexer
    from tensorflow_similarity.search import FaissOnDiskSearch
    from tensorflow_similarity.stores import MemmapStore

    def status_mb(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024

    folder = sys.argv[1]
    search = FaissOnDiskSearch(
        "l2", dim=32, nlist=256, nprobe=4, directory=f"{folder}/search", page_budget=4 << 20
    )
    index = Indexer(32, "l2", search=search, kv_store=MemmapStore(f"{folder}/store"))
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((64, 32), dtype=np.float32)
    memory = {}

    def batches(first, last):
        for step in range(first, last):
            yield rng.standard_normal((100_000, 32), dtype=np.float32), np.full(100_000, step)

    for first, last in ((0, 5), (5, 20)):
        index.batch_add(batches(first, last))
        added = index.size()
        after_add = status_mb("RssFile")
        index.batch_lookup(queries, k=10, verbose=0)
        index.batch_get(rng.choice(added, 4000, replace=False).tolist())
        memory[added] = {
            "peak": status_mb("VmHWM"),
            "file_after_add": after_add,
            "file_after_reads": status_mb("RssFile"),
        }
    assert index.size() == 2_000_000
    print(json.dumps(memory))
    """
)


@pytest.mark.slow
def test_resident_memory_does_not_grow_with_the_index(tmp_path):
    # 2,000,000 32-d embeddings with labels from a generator, through Indexer.batch_add into a
    # MemmapStore and this search, 100,000 at a time; after 500,000 and after 2,000,000 a
    # 64-query lookup and a batch_get of 4,000 random ids. From 500,000 to 2,000,000 the store
    # and the lists take 1.5e6 * 128 bytes of embeddings each, more than 180 MiB, while the peak
    # resident memory must grow by less than a third of that: neither the stream, the store nor
    # the search holds them. What does grow is the index's table of ids (9 bytes an item, twice
    # that while it is reallocated) and
    # the pages of the lists not yet released (page_budget, 4 MiB here). The pages of the
    # files mapped into the process (RssFile) must not grow with the count either, after the
    # adds (the store's appends) nor after the reads (the store's rows, read without mapping
    # its files).
    bound_mb = 45
    assert 1_500_000 * 32 * 4 / 2**20 >= 3 * bound_mb
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    memory = {int(count): mb for count, mb in json.loads(result.stdout.splitlines()[-1]).items()}
    small, big = memory[500_000], memory[2_000_000]
    for measure in ("peak", "file_after_add", "file_after_reads"):
        assert big[measure] - small[measure] < bound_mb, (measure, memory)


def test_train_on_other_samples_then_add():
    rng = np.random.default_rng(5)
    samples, keys, queries = (
        rng.normal(size=(64, 4)),
        rng.normal(size=(30, 4)),
        rng.normal(size=(5, 4)),
    )
    search = FaissOnDiskSearch("cosine", dim=4, nlist=4, nprobe=4)
    search.batch_add(keys[:10], np.arange(10))
    search.train(samples)
    assert search.is_built()
    search.batch_add(keys[10:], np.arange(10, 30))
    want_ids, want_distances = knn_loop("cosine", queries, keys, np.arange(30), 6)
    idxs, distances = search.batch_lookup(queries, k=6)
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="already trained"):
        search.train(samples)


@pytest.mark.parametrize("trained", [False, True])
def test_saved_into_its_working_folder_loads(tmp_path, trained):
    # Saving into `directory` itself writes no copy; before training the folder had no
    # lists file, and the saved index then refused to load.
    rng = np.random.default_rng(5)
    keys, queries = rng.normal(size=(60, 4)), rng.normal(size=(3, 4))
    search = FaissOnDiskSearch(
        "euclidean", dim=4, nlist=4, nprobe=4, train_size=40, directory=tmp_path
    )
    search.batch_add(keys if trained else keys[:20], np.arange(60 if trained else 20))
    assert search.is_built() == trained
    search.save(tmp_path)
    loaded = FaissOnDiskSearch("euclidean", dim=4, nlist=4, nprobe=4, directory=tmp_path)
    loaded.load(tmp_path)
    count = 60 if trained else 20
    want_ids, want_distances = knn_loop("euclidean", queries, keys[:count], np.arange(count), 3)
    idxs, distances = loaded.batch_lookup(queries, k=3)
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=1e-5)
    # Loaded in place, it changes the saved files themselves (it mapped them read-only).
    extra = rng.normal(size=(5, 4))
    loaded.remove([0, 1])
    loaded.upsert(extra[:2], [2, 3])
    loaded.batch_add(extra[2:], [100, 101, 102])
    loaded.compact()
    loaded.save(tmp_path)
    again = FaissOnDiskSearch("euclidean", dim=4, nlist=4, nprobe=4, directory=tmp_path)
    again.load(tmp_path)
    keys = np.concatenate([extra[:2], keys[4:count], extra[2:]])
    ids = np.concatenate([[2, 3], np.arange(4, count), [100, 101, 102]])
    want_ids, want_distances = knn_loop("euclidean", queries, keys, ids, 3)
    idxs, distances = again.batch_lookup(queries, k=3)
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=1e-5)


def test_a_new_search_on_a_saved_folder_keeps_it_until_it_changes(tmp_path):
    # Creating a search on the folder of a saved index used to delete that index at once.
    rng = np.random.default_rng(6)
    keys = rng.normal(size=(50, 4))
    search = FaissOnDiskSearch("l2", dim=4, nlist=2, nprobe=2, train_size=20, directory=tmp_path)
    search.batch_add(keys, np.arange(50))
    search.save(tmp_path)
    saved = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    fresh = FaissOnDiskSearch("l2", dim=4, nlist=2, nprobe=2, directory=tmp_path)
    assert fresh.size() == 0 and len(fresh.ids()) == 0
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == saved
    with pytest.warns(UserWarning, match="holds a saved index that this search did not load"):
        fresh.batch_add(keys[:3], np.arange(3) + 100)
    assert fresh.ids().tolist() == [100, 101, 102]
    np.testing.assert_array_equal(fresh.batch_lookup(keys[:1], k=1)[0], [[100]])


def test_saving_a_new_empty_search_over_a_saved_folder_replaces_it(tmp_path):
    # The saved ids file stayed, so the new (empty) save refused to load.
    search = FaissOnDiskSearch("l2", dim=4, nlist=2, nprobe=2, train_size=20, directory=tmp_path)
    search.batch_add(np.random.default_rng(7).normal(size=(30, 4)), np.arange(30))
    search.save(tmp_path)
    fresh = FaissOnDiskSearch("l2", dim=4, nlist=2, nprobe=2, directory=tmp_path)
    with pytest.warns(UserWarning, match="holds a saved index that this search did not load"):
        fresh.save(tmp_path)
    loaded = FaissOnDiskSearch("l2", dim=4, nlist=2, nprobe=2, directory=tmp_path)
    loaded.load(tmp_path)
    assert loaded.size() == 0 and len(loaded.ids()) == 0
