"""FaissSearch: distances as LinearSearch reports them, ivfpq training, hnsw recall, errors."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tensorflow_similarity.search import FaissSearch, LinearSearch
from tensorflow_similarity.stores.npz import write_npz
from tests.search.references import knn_loop

pytest.importorskip("faiss")


@pytest.mark.parametrize(
    "distance", ["cosine", "inner_product", "euclidean", "squared_euclidean", "manhattan"]
)
@pytest.mark.parametrize("algo", ["flat", "hnsw"])
def test_exact_on_small_data_for_each_distance(distance, algo):
    rng = np.random.default_rng(0)
    keys, queries = rng.normal(size=(50, 6)), rng.normal(size=(7, 6))
    ids = rng.permutation(500)[:50]
    search = FaissSearch(distance, dim=6, algo=algo)
    search.batch_add(keys, ids)
    idxs, distances = search.batch_lookup(queries, k=4)
    want_ids, want_distances = knn_loop(distance, queries, keys, ids, 4)
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=1e-4, atol=1e-4)


def test_hnsw_recall_against_exact():
    rng = np.random.default_rng(1)
    keys, queries = rng.normal(size=(3000, 32)), rng.normal(size=(100, 32))
    exact, approximate = LinearSearch("l2", dim=32), FaissSearch("l2", dim=32, algo="hnsw")
    for search in (exact, approximate):
        search.batch_add(keys, np.arange(3000))
    want, got = exact.batch_lookup(queries, k=10)[0], approximate.batch_lookup(queries, k=10)[0]
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want, strict=True)])
    assert recall >= 0.9


def test_ivfpq_trains_on_its_first_batch_and_finds_near_duplicates(tmp_path):
    rng = np.random.default_rng(2)
    keys = rng.normal(size=(600, 16)).astype(np.float32)
    search = FaissSearch("cosine", dim=16, algo="ivfpq", m=4, nbits=6, nlist=8, nprobe=8)
    assert not search.is_built()
    search.batch_add(keys, np.arange(600) + 1000)
    assert search.is_built() and search.size() == 600
    queries = keys[:50] + 0.01 * rng.normal(size=(50, 16))
    idxs, distances = search.batch_lookup(queries, k=5)
    assert np.mean(idxs[:, 0] == np.arange(50) + 1000) >= 0.8
    assert (np.diff(distances, axis=1) >= 0).all()
    search.save(tmp_path)
    loaded = FaissSearch("cosine", dim=16, algo="ivfpq", m=4, nbits=6, nlist=8, nprobe=8)
    loaded.load(tmp_path)
    for got, want in zip(loaded.batch_lookup(queries, k=5), (idxs, distances), strict=True):
        np.testing.assert_array_equal(got, want)


def test_ivfpq_refuses_too_small_a_first_batch_before_any_work():
    search = FaissSearch("l2", dim=16, algo="ivfpq", m=4, nbits=6, nlist=8)
    with pytest.raises(ValueError, match="at least max\\(nlist, 2\\*\\*nbits\\) = 64"):
        search.batch_add(np.ones((10, 16)), np.arange(10))
    assert search.size() == 0 and not search.is_built()
    search.train(np.random.default_rng(3).normal(size=(100, 16)))
    search.batch_add(np.ones((10, 16)), np.arange(10))  # trained: a small batch is fine now
    assert search.size() == 10


def test_missing_neighbours_are_id_minus_one_at_infinity():
    rng = np.random.default_rng(4)
    # Two far-apart clusters; probing one cell of two cannot return all 20.
    keys = np.concatenate([rng.normal(size=(300, 8)) + 50, rng.normal(size=(300, 8)) - 50])
    search = FaissSearch("l2", dim=8, algo="ivfpq", m=2, nbits=4, nlist=2, nprobe=1)
    search.batch_add(keys, np.arange(600))
    idxs, distances = search.batch_lookup(keys[:1], k=400)
    assert (idxs[0, 300:] == -1).all() and np.isinf(distances[0, 300:]).all()
    assert (idxs[0, :300] < 300).all()


def test_load_refuses_another_algo(tmp_path):
    flat = FaissSearch("l2", dim=4)
    flat.batch_add(np.ones((3, 4)), [0, 1, 2])
    flat.save(tmp_path)
    hnsw = FaissSearch("l2", dim=4, algo="hnsw")
    with pytest.raises(ValueError, match="algo='flat'"):
        hnsw.load(tmp_path)
    assert hnsw.size() == 0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"distance": "snr"}, "LinearSearch"),
        ({"algo": "annoy"}, "algo must be one of"),
        ({"algo": "ivfpq", "m": 3}, "multiple of m"),
        ({"algo": "ivfpq", "distance": "manhattan"}, "not manhattan"),
        ({"nprobe": 0}, "nprobe"),
    ],
)
def test_unsupported_settings_are_refused(kwargs, match):
    kwargs = {"distance": "l2", "dim": 16, **kwargs}
    with pytest.raises(ValueError, match=match):
        FaissSearch(**kwargs)


def test_without_faiss_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # makes `import faiss` fail
    with pytest.raises(ImportError, match=r"tensorflow-similarity\[faiss\]"):
        FaissSearch("cosine", dim=4)


def test_config_round_trip():
    search = FaissSearch("ip", dim=8, algo="hnsw", ef_search=40)
    config = search.get_config()
    assert config["algo"] == "hnsw" and config["ef_search"] == 40
    assert config["distance"] == "inner_product"
    assert FaissSearch.from_config(config).get_config() == config


@pytest.mark.parametrize("algo", ["flat", "hnsw"])
def test_load_refuses_nan_embeddings_and_changes_nothing(tmp_path, algo):
    faiss = pytest.importorskip("faiss")
    saved = FaissSearch("l2", dim=4, algo=algo)
    saved.batch_add(np.ones((3, 4)), [0, 1, 2])
    saved.save(tmp_path)
    # The file a search holding NaN rows would write (Search.batch_add refuses them).
    rows = np.ones((3, 4), np.float32)
    rows[2] = np.nan
    index = faiss.IndexFlatL2(4) if algo == "flat" else faiss.IndexHNSWFlat(4, 48)
    index.add(rows)
    arrays = {
        "config": np.array(json.dumps(saved.get_config())),
        "index": faiss.serialize_index(index),
        "idxs": np.arange(3),
    }
    write_npz(tmp_path / "faiss_search.npz", arrays, kind="FaissSearch", format_version=1)
    target = FaissSearch("l2", dim=4, algo=algo)
    target.batch_add(np.zeros((2, 4)), [7, 8])
    with pytest.raises(ValueError, match="faiss_search.npz' holds 1 embeddings with NaN"):
        target.load(tmp_path)
    assert target.ids().tolist() == [7, 8] and target.size() == 2
    assert target.saved_files() == ["faiss_search.npz", "faiss_search.faiss"]
