"""The contract every search backend keeps: verbs, save/load, errors before any work.

Run for LinearSearch and for FaissSearch flat and hnsw (when faiss is installed).
"""

from __future__ import annotations

import importlib.util

import keras
import numpy as np
import pytest

from tensorflow_similarity.search import FaissSearch, LinearSearch, make_search
from tensorflow_similarity.stores.npz import write_npz
from tests.search.references import knn_loop

DIM = 8
# On 40 embeddings hnsw explores the whole graph, so it is exact too.
BACKENDS = {
    "linear": lambda distance, dim=DIM: LinearSearch(distance, dim=dim),
}
if importlib.util.find_spec("faiss") is not None:
    BACKENDS["faiss_flat"] = lambda distance, dim=DIM: FaissSearch(distance, dim=dim)
    BACKENDS["faiss_hnsw"] = lambda distance, dim=DIM: FaissSearch(distance, dim=dim, algo="hnsw")


@pytest.fixture(params=sorted(BACKENDS))
def make(request):
    return BACKENDS[request.param]


def _filled(make, distance="cosine", count=40, seed=0):
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=(count, DIM)).astype(np.float32)
    search = make(distance)
    search.batch_add(keys, np.arange(100, 100 + count))
    return search, keys


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "euclidean", "squared_euclidean"])
def test_lookup_is_exact_and_sorted(make, distance):
    search, keys = _filled(make, distance)
    queries = np.random.default_rng(5).normal(size=(6, DIM))
    idxs, distances = search.batch_lookup(queries, k=7)
    want_ids, want_distances = knn_loop(distance, queries, keys, np.arange(100, 140), 7)
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=1e-4, atol=1e-4)
    assert (np.diff(distances, axis=1) >= 0).all()


def test_single_verbs_agree_with_batch_verbs(make):
    search, keys = _filled(make)
    other = make("cosine")
    for i, key in enumerate(keys):
        other.add(key, 100 + i)
    assert len(other) == other.size() == len(search) == 40
    idx, distance = other.lookup(keys[3], k=4)
    idxs, distances = search.batch_lookup(keys[3:4], k=4)
    np.testing.assert_array_equal(idx, idxs[0])
    np.testing.assert_allclose(distance, distances[0], atol=1e-6)
    assert idx[0] == 103


def test_empty_query_batch(make):
    search, _ = _filled(make)
    idxs, distances = search.batch_lookup(np.zeros((0, DIM)), k=3)
    assert idxs.shape == distances.shape == (0, 3)


def test_reset_empties(make):
    search, _ = _filled(make)
    search.reset()
    assert search.size() == 0
    with pytest.raises(ValueError, match="empty"):
        search.lookup(np.ones(DIM), k=1)


def test_save_load_answers_as_before(make, tmp_path):
    search, keys = _filled(make, "euclidean")
    search.save(tmp_path)
    loaded = make("euclidean")
    loaded.load(tmp_path)
    assert loaded.size() == 40
    for got, want in zip(
        loaded.batch_lookup(keys, k=3), search.batch_lookup(keys, k=3), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    loaded.batch_add(keys[:2], [7, 8])  # still usable after loading
    assert loaded.size() == 42


def _unchanged(search, keys, before):
    after = search.batch_lookup(keys[:5], k=3)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])


@pytest.mark.parametrize(
    "distance, dim, match", [("cosine", DIM, "distance"), ("euclidean", 5, "dim")]
)
def test_load_refuses_another_distance_or_dim(make, tmp_path, distance, dim, match):
    saved, _ = _filled(make, "euclidean", count=10, seed=1)
    saved.save(tmp_path)
    target = make(distance, dim=dim)
    keys = np.random.default_rng(2).normal(size=(6, dim))
    target.batch_add(keys, np.arange(6))
    before = target.batch_lookup(keys[:5], k=3)
    with pytest.raises(ValueError, match=match):
        target.load(tmp_path)
    _unchanged(target, keys, before)


def test_load_refuses_a_corrupt_file(make, tmp_path):
    search, keys = _filled(make)
    before = search.batch_lookup(keys[:5], k=3)
    with pytest.raises(FileNotFoundError, match="save"):
        search.load(tmp_path / "nothing")
    search.save(tmp_path / "good")
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for path in (tmp_path / "good").iterdir():
        content = path.read_bytes()
        (corrupt / path.name).write_bytes(content[: len(content) // 2])
    with pytest.raises(ValueError):
        search.load(corrupt)
    _unchanged(search, keys, before)


def test_load_refuses_another_format_version(tmp_path):
    search = LinearSearch("cosine", dim=2)
    write_npz(
        tmp_path / "linear_search.npz",
        {"config": np.array("{}")},
        kind="LinearSearch",
        format_version=99,
    )
    with pytest.raises(ValueError, match="format version 99"):
        search.load(tmp_path)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: s.batch_lookup(np.ones((2, DIM + 1)), k=1), r"shape \[n, 8\]"),
        (lambda s: s.lookup(np.ones(DIM - 1), k=1), r"shape \[8\]"),
        (lambda s: s.batch_lookup(np.ones((2, DIM)), k=41), "larger than the index"),
        (lambda s: s.batch_lookup(np.ones((2, DIM)), k=0), "positive integer"),
        (lambda s: s.batch_lookup(np.ones((2, DIM)), k=2.5), "positive integer"),
        (lambda s: s.batch_add(np.ones((3, DIM)), [1, 2]), "one id per embedding"),
        (lambda s: s.batch_add(np.ones((2, DIM)), [1.5, 2.0]), "integers"),
        (lambda s: s.batch_add(np.ones((2, DIM + 2)), [1, 2]), r"shape \[n, 8\]"),
        (lambda s: s.batch_add(np.full((2, DIM), np.nan), [1, 2]), "NaN"),
        (lambda s: s.add(np.ones(DIM + 1), 3), r"shape \[8\]"),
    ],
)
def test_bad_input_is_refused_before_any_work(make, call, match):
    search, keys = _filled(make)
    before = search.batch_lookup(keys[:5], k=3)
    with pytest.raises(ValueError, match=match):
        call(search)
    assert search.size() == 40
    _unchanged(search, keys, before)


def test_lookup_on_an_empty_index(make):
    with pytest.raises(ValueError, match="empty"):
        make("cosine").batch_lookup(np.ones((1, DIM)), k=1)


def test_keras_serialisation_keeps_the_class_and_config(make):
    search = make("euclidean")
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(search))
    assert type(rebuilt) is type(search)
    assert rebuilt.get_config() == search.get_config()
    assert rebuilt.size() == 0


@pytest.mark.parametrize("dim", [0, -1, 2.0, None])
def test_dim_must_be_a_positive_integer(dim):
    with pytest.raises(ValueError, match="dim"):
        LinearSearch("cosine", dim=dim)


def test_make_search_by_name_or_instance():
    search = make_search("LINEAR", "l2", 3)
    assert type(search) is LinearSearch and search.distance.name == "euclidean" and search.dim == 3
    assert make_search(search, "l2", 3) is search
    with pytest.raises(ValueError, match="dim=3"):
        make_search(search, "l2", 4)
    with pytest.raises(ValueError, match="Unknown search 'nmslib'"):
        make_search("nmslib", "cosine", 3)


def test_positional_arguments_bind_as_in_017():
    # 0.17: Search(distance, dim, verbose, name); a subclass's own arguments come
    # between dim and verbose, as in 0.17's NMSLibSearch.
    search = LinearSearch("l2", 4, 1024, 1, "mine")
    assert (search.distance.name, search.dim, search.max_chunk_elements) == ("euclidean", 4, 1024)
    assert (search.verbose, search.name) == (1, "mine")
    if "faiss_flat" in BACKENDS:
        faiss = FaissSearch("l2", 4, "flat", 2, 8, 16, 2, 8, 40, 64, 1, "mine")
        assert (faiss.verbose, faiss.name, faiss.ef_search) == (1, "mine", 64)


def test_add_and_batch_add_take_017s_verbose(make, capsys):
    keys = np.random.default_rng(0).normal(size=(3, DIM))
    search = make("cosine")
    search.batch_add(keys[:2], [0, 1])
    search.add(keys[2], 2, 0, build=True)  # 0.17: add(embedding, idx, verbose, build=...)
    assert capsys.readouterr().out == ""
    search.batch_add(keys, [3, 4, 5], 1)
    assert "added 3 embeddings, 6 indexed" in capsys.readouterr().out
    search.add(keys[0], 6, verbose=1)
    assert "added 1 embedding, 7 indexed" in capsys.readouterr().out
    search.verbose = 1  # the search's own verbosity is the default
    search.add(keys[0], 7)
    assert "8 indexed" in capsys.readouterr().out
    with pytest.raises(ValueError, match="verbose must be a non-negative integer"):
        search.batch_add(keys, [8, 9, 10], verbose=-1)
    assert search.size() == 8
