"""MilvusSearch on Milvus Lite: exact lookups, recall, lifecycle, save/load, clear errors."""

from __future__ import annotations

import itertools
import json
import socket

import numpy as np
import pytest

from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.search import LinearSearch, MilvusSearch, make_search
from tests.search.references import knn_loop

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

_COLLECTIONS = itertools.count()


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    """One Milvus Lite database for the module; each test makes its own collections."""
    return str(tmp_path_factory.mktemp("milvus") / "index.db")


def _search(uri, distance="cosine", dim=8, **kwargs):
    kwargs.setdefault("collection", f"c{next(_COLLECTIONS)}")
    return MilvusSearch(distance, dim, uri=uri, **kwargs)


def _closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "euclidean", "squared_euclidean"])
def test_flat_lookups_equal_exact_search(uri, distance):
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(200, 8)).astype(np.float32)
    queries = rng.normal(size=(9, 8)).astype(np.float32)
    ids = rng.permutation(10_000)[:200]
    search, linear = _search(uri, distance), LinearSearch(distance, dim=8)
    for index in (search, linear):
        index.batch_add(keys, ids)
    got_ids, got_distances = search.batch_lookup(queries, k=10)
    want_ids, want_distances = knn_loop(distance, queries, keys, ids, 10)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_distances, want_distances, rtol=1e-5, atol=1e-5)
    linear_ids, linear_distances = linear.batch_lookup(queries, k=10)
    np.testing.assert_array_equal(got_ids, linear_ids)
    np.testing.assert_allclose(got_distances, linear_distances, rtol=1e-5, atol=1e-5)
    assert got_distances.dtype == np.float32 and got_ids.dtype == np.int64
    assert search.size() == 200 and search.is_exact


@pytest.mark.parametrize("index_type", ["HNSW", "IVF_FLAT"])
def test_ann_index_reaches_its_recall_on_clustered_data(uri, index_type):
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(20, 16))
    keys = (centres[rng.integers(0, 20, 2000)] + 0.3 * rng.normal(size=(2000, 16))).astype(
        np.float32
    )
    queries = (centres[rng.integers(0, 20, 50)] + 0.3 * rng.normal(size=(50, 16))).astype(
        np.float32
    )
    search = _search(uri, "l2", dim=16, index_type=index_type)
    search.batch_add(keys, np.arange(2000))
    want = knn_loop("euclidean", queries, keys, np.arange(2000), 10)[0]
    got = search.batch_lookup(queries, k=10)[0]
    recall = np.mean([len(set(g) & set(w)) / 10 for g, w in zip(got, want, strict=True)])
    assert recall >= 0.95, recall
    assert not search.is_exact


def test_remove_and_upsert_map_to_the_database(uri):
    rng = np.random.default_rng(2)
    keys, queries = rng.normal(size=(60, 8)), rng.normal(size=(5, 8))
    search = _search(uri, "l2")
    search.batch_add(keys, np.arange(60))
    search.remove([0, 5, 7])
    assert search.size() == 57
    kept = np.setdiff1d(np.arange(60), [0, 5, 7])
    want = knn_loop("euclidean", queries, keys[kept], kept, 57)
    got = search.batch_lookup(queries, k=57)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    # Replaces id 3 and brings back the removed id 5, under their ids.
    search.upsert(np.stack([queries[0], queries[1]]), [3, 5])
    assert search.size() == 58
    idxs, distances = search.batch_lookup(queries[:2], k=1)
    assert idxs[:, 0].tolist() == [3, 5]
    np.testing.assert_allclose(distances[:, 0], 0.0, atol=1e-5)
    np.testing.assert_array_equal(search.ids(), np.sort(np.r_[kept, 5]))


def test_remove_of_an_absent_id_removes_nothing(uri):
    search = _search(uri, "l2")
    search.batch_add(np.eye(8)[:4], [1, 2, 3, 4])
    with pytest.raises(ValueError, match=r"does not hold: \[9\].*Nothing was removed"):
        search.remove([2, 9])
    with pytest.raises(ValueError, match="more than once"):
        search.remove([2, 2])
    assert search.size() == 4


def test_batch_add_refuses_held_or_repeated_ids(uri):
    search = _search(uri, "l2")
    search.batch_add(np.eye(8)[:2], [1, 2])
    with pytest.raises(ValueError, match=r"already holds the ids \[2\].*upsert"):
        search.batch_add(np.eye(8)[2:4], [3, 2])
    with pytest.raises(ValueError, match="more than once"):
        search.batch_add(np.eye(8)[2:4], [3, 3])
    assert search.size() == 2
    # Ids above every id it holds need no lookup (a query per batch made adding quadratic);
    # one at or below them still does.
    looked_up = []
    held_ids = search._held_ids
    search._held_ids = lambda ids: looked_up.append(ids.tolist()) or held_ids(ids)
    search.batch_add(np.eye(8)[4:6], [7, 8])
    assert looked_up == [] and search.size() == 4
    search.batch_add(np.eye(8)[6:8], [5, 9])
    assert looked_up == [[5]] and search.size() == 6


def test_labels_and_names_go_with_each_row(uri):
    search = _search(uri, "l2")
    search.batch_add(np.eye(8)[:4], [10, 11, 12, 13], labels=[0, 1, 1, 0], names=list("abcd"))
    idxs, distances = search.batch_lookup(np.eye(8)[:1], k=4, filter="label == 1")
    assert sorted(idxs[0, :2].tolist()) == [11, 12]
    assert idxs[0, 2:].tolist() == [-1, -1] and np.isinf(distances[0, 2:]).all()
    assert search.batch_lookup(np.eye(8)[:1], k=1, filter='name == "d"')[0].tolist() == [[13]]
    search.upsert(np.eye(8)[3:4], [13], labels=[1], names=["z"])
    assert search.batch_lookup(np.eye(8)[3:4], k=1, filter="label == 1")[0].tolist() == [[13]]
    with pytest.raises(ValueError, match="labels must be 2 integers"):
        search.batch_add(np.eye(8)[:2], [20, 21], labels=[0.5, 1.5])
    with pytest.raises(ValueError, match="names must be 2 strings"):
        search.batch_add(np.eye(8)[:2], [20, 21], names=["x"])


def test_save_writes_the_config_and_load_reconnects(uri, tmp_path):
    rng = np.random.default_rng(3)
    keys = rng.normal(size=(30, 8))
    search = _search(uri, "cosine")
    search.batch_add(keys, np.arange(30))
    before = search.batch_lookup(keys[:3], k=5)
    search.save(tmp_path)
    saved = json.loads((tmp_path / "milvus_search.json").read_text())
    assert saved["config"]["uri"] == uri and saved["config"]["collection"] == search.collection
    assert search.saved_files() == ["milvus_search.json"]
    other = _search(uri, "cosine")
    other.load(tmp_path)
    assert other.collection == search.collection and other.size() == 30
    after = other.batch_lookup(keys[:3], k=5)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_allclose(after[1], before[1], rtol=1e-6, atol=1e-6)


def test_a_loaded_search_shows_only_the_saved_rows_filter_included(uri, tmp_path):
    rng = np.random.default_rng(5)
    keys, queries = rng.normal(size=(10, 8)), rng.normal(size=(3, 8))
    labels = np.arange(10) % 2
    writer = _search(uri, "l2")
    writer.batch_add(keys[:6], np.arange(6), labels=labels[:6])
    writer.save(tmp_path)
    reader = _search(uri, "l2")
    reader.load(tmp_path)
    writer.batch_add(keys[6:], np.arange(6, 10), labels=labels[6:])  # not saved
    assert writer.size() == 10 and reader.size() == 6
    np.testing.assert_array_equal(reader.ids(), np.arange(6))
    saved_odd = np.array([1, 3, 5])
    want = knn_loop("euclidean", queries, keys[saved_odd], saved_odd, 3)
    got = reader.batch_lookup(queries, k=3, filter="label == 1")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
    assert (writer.max_visible_id, reader.max_visible_id) == (9, 5)
    # A search opened on the collection shows every row, and its save records the last id.
    opened = _search(uri, "l2", collection=writer.collection)
    assert opened.max_visible_id is None and opened.size() == 10
    opened.save(tmp_path / "opened")
    assert (
        json.loads((tmp_path / "opened" / "milvus_search.json").read_text())["max_visible_id"] == 9
    )
    # A save of format 1 recorded no bound: every row shows.
    file = tmp_path / "milvus_search.json"
    record = json.loads(file.read_text())
    file.write_text(json.dumps({**record, "format_version": 1, "max_visible_id": None}))
    reader.load(tmp_path)
    assert reader.max_visible_id is None and reader.size() == 10
    file.write_text(json.dumps({**record, "max_visible_id": "5"}))
    with pytest.raises(ValueError, match="max_visible_id '5' is not an integer"):
        reader.load(tmp_path)


def test_indexer_save_and_load_keep_the_collection(uri, tmp_path):
    rng = np.random.default_rng(4)
    keys = rng.normal(size=(20, 8)).astype(np.float32)
    index = Indexer(embedding_size=8, distance="cosine", search=_search(uri, "cosine"))
    index.batch_add(keys, labels=np.arange(20) % 3, verbose=0)
    index.save(tmp_path)
    loaded = Indexer.load(tmp_path)
    assert isinstance(loaded.search, MilvusSearch) and loaded.search.size() == 20
    got = loaded.batch_lookup(keys[:2], k=3, verbose=0)
    want = index.batch_lookup(keys[:2], k=3, verbose=0)
    assert [[(lk.label, lk.distance) for lk in row] for row in got] == [
        [(lk.label, lk.distance) for lk in row] for row in want
    ]


def test_an_unreachable_server_is_named_before_any_work():
    bad_uri = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(ConnectionError, match=rf"uri '{bad_uri}', collection 'items'.*reach"):
        MilvusSearch("cosine", 8, uri=bad_uri, collection="items", timeout=2)


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"dim": 4}, "dim=8"),
        ({"distance": "inner_product"}, "metric='COSINE'"),
        ({"index_type": "HNSW"}, "index_type='FLAT'"),
    ],
)
def test_a_collection_of_another_dim_metric_or_index_is_refused(uri, changed, message):
    search = _search(uri, "cosine")
    search.batch_add(np.eye(8)[:2], [0, 1])
    arguments = {"distance": "cosine", "dim": 8, **changed}
    pattern = rf"collection '{search.collection}'.*exists with {message}"
    with pytest.raises(ValueError, match=pattern):
        MilvusSearch(uri=uri, collection=search.collection, **arguments)
    assert search.size() == 2


def test_a_dropped_collection_is_named(uri):
    search = _search(uri, "l2")
    search.batch_add(np.eye(8)[:2], [0, 1])
    search._client.drop_collection(search.collection)
    pattern = rf"uri '{uri}', collection '{search.collection}'.*dropped"
    with pytest.raises(RuntimeError, match=pattern):
        search.batch_lookup(np.eye(8)[:1], k=1)
    with pytest.raises(RuntimeError, match=pattern):
        search.batch_add(np.eye(8)[2:3], [2])
    search.reset()
    assert search.size() == 0


def test_arguments_are_checked_before_connecting(uri):
    with pytest.raises(ValueError, match="needs uri="):
        make_search("milvus", "cosine", 8)
    with pytest.raises(ValueError, match="Use LinearSearch"):
        MilvusSearch("manhattan", 8, uri=uri)
    assert isinstance(make_search("milvus", "cosine", 8, uri=uri, collection="named"), MilvusSearch)


def test_a_released_collection_is_loaded_again_when_reopened(uri):
    # A collection reopened by a new process (or after a server restart) is released;
    # reopening it must load it, or every count and search fails.
    keys = np.random.default_rng(3).normal(size=(20, 8)).astype(np.float32)
    first = _search(uri, "l2")
    first.batch_add(keys, np.arange(20))
    first._client.release_collection(first.collection)
    reopened = _search(uri, "l2", collection=first.collection)
    assert reopened.size() == 20
    got_ids, _ = reopened.batch_lookup(keys[:3], k=1)
    np.testing.assert_array_equal(got_ids[:, 0], [0, 1, 2])
