"""LinearSearch against float64 NumPy loops, for every distance, and its chunking."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.distances import ManhattanDistance
from tensorflow_similarity.search import LinearSearch, linear_search
from tensorflow_similarity.stores.npz import write_npz
from tests.search.references import REFERENCES, knn_loop


@pytest.mark.parametrize("distance", sorted(REFERENCES))
def test_batch_lookup_matches_loops(distance):
    rng = np.random.default_rng(0)
    keys = rng.normal(size=(60, 7))
    queries = rng.normal(size=(9, 7))
    ids = rng.permutation(1000)[:60]
    search = LinearSearch(distance, dim=7)
    search.batch_add(keys, ids)
    idxs, distances = search.batch_lookup(queries, k=5)
    want_ids, want_distances = knn_loop(distance, queries, keys, ids, 5)
    assert idxs.shape == (9, 5) and idxs.dtype == np.int64 and distances.dtype == np.float32
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=2e-4, atol=2e-5)


def test_inner_product_ranks_the_largest_product_first_and_reports_it_negated():
    search = LinearSearch("inner_product", dim=2)
    search.batch_add([[1.0, 0.0], [5.0, 0.0], [-3.0, 0.0]], [0, 1, 2])
    idxs, distances = search.lookup([1.0, 0.0], k=3)
    assert idxs.tolist() == [1, 0, 2]
    np.testing.assert_allclose(distances, [-5.0, -1.0, 3.0])


def test_cosine_ignores_the_norms():
    search = LinearSearch("cosine", dim=2)
    search.batch_add([[10.0, 0.0], [0.0, 0.1]], [0, 1])
    idxs, distances = search.lookup([0.0, 7.0], k=2)
    assert idxs.tolist() == [1, 0]
    np.testing.assert_allclose(distances, [0.0, 1.0], atol=1e-6)


@pytest.mark.parametrize("distance", ["cosine", "euclidean", "manhattan"])
def test_chunked_lookup_equals_one_chunk(distance):
    rng = np.random.default_rng(1)
    keys, queries = rng.normal(size=(50, 4)), rng.normal(size=(23, 4))
    whole = LinearSearch(distance, dim=4)
    chunked = LinearSearch(distance, dim=4, max_chunk_elements=120)  # 23 queries by 5 rows
    for search in (whole, chunked):
        search.batch_add(keys, np.arange(50))
    want, got = whole.batch_lookup(queries, k=4), chunked.batch_lookup(queries, k=4)
    np.testing.assert_array_equal(got[0], want[0])
    # Matrix products of another shape may round differently in the last bits.
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


def _tied_keys_with_removed_rows(distance):
    """40 copies of 6 integer rows (exact ties), a third removed, and 23 integer queries.

    Returns the search's keys, ids, removed ids and queries. The distances of
    the 6 distinct rows to a query are equal (exactly, in float32 too: integers)
    or differ by more than float32 rounds, so the loops' order is the search's.
    """
    rng = np.random.default_rng(15)
    bases = rng.integers(-3, 4, size=(6, 5)).astype(np.float32)
    queries = rng.integers(-3, 4, size=(23, 5)).astype(np.float32)
    exact = distance in ("inner_product", "euclidean", "squared_euclidean", "manhattan")
    for query in queries:
        gaps = np.diff(np.sort([REFERENCES[distance](query, base) for base in bases]))
        assert np.all((gaps > 1e-4) | (exact & (gaps == 0))), "near ties: choose another seed"
    keys = bases[rng.integers(0, 6, size=40)]
    ids = rng.permutation(1000)[:40]
    return keys, ids, ids[::3], queries


@pytest.mark.parametrize("distance", sorted(REFERENCES))
@pytest.mark.parametrize(
    "max_chunk_elements, blocks",
    [
        (12, {}),  # 12 queries by 1 row a block
        (10**6, {"QUERY_BLOCK": 5, "BLOCK_ELEMENTS": 35}),  # 5 queries by 7 rows a block
    ],
    ids=["max-chunk-12", "5-queries-by-7-rows"],
)
@pytest.mark.parametrize(
    "merge", [0, 10**9], ids=["merge-candidates", "merge-block-top-k"]
)  # CANDIDATE_COST: the two ways a block is merged
def test_blocked_lookup_keeps_ties_in_order_and_skips_removed_rows(
    distance, max_chunk_elements, blocks, merge, monkeypatch
):
    """Several query blocks and row blocks, ties across blocks: the loops' answer."""
    for name, value in {**blocks, "CANDIDATE_COST": merge}.items():
        monkeypatch.setattr(linear_search, name, value)
    keys, ids, removed, queries = _tied_keys_with_removed_rows(distance)
    search = LinearSearch(distance, dim=5, max_chunk_elements=max_chunk_elements)
    search.batch_add(keys, ids)
    search.remove(removed)
    idxs, distances = search.batch_lookup(queries, k=8)
    alive = ~np.isin(ids, removed)
    # 26 rows alive, 2 to 7 copies of each distinct one: ties cross the blocks and k.
    want_ids, want_distances = knn_loop(distance, queries, keys[alive], ids[alive], 8)
    np.testing.assert_array_equal(idxs, want_ids)
    np.testing.assert_allclose(distances, want_distances, rtol=2e-4, atol=2e-5)


class _RecordingManhattan(ManhattanDistance):
    """Manhattan distance that records the shape of every block it computes."""

    def __init__(self):
        super().__init__()
        self.blocks = []

    def call(self, query_embeddings, key_embeddings):
        self.blocks.append((int(query_embeddings.shape[0]), int(key_embeddings.shape[0])))
        return super().call(query_embeddings, key_embeddings)


def test_max_chunk_elements_bounds_every_block_of_scores_even_below_the_row_count():
    rng = np.random.default_rng(1)
    keys, queries = rng.normal(size=(50, 4)), rng.normal(size=(23, 4))
    distance = _RecordingManhattan()
    search = LinearSearch(distance, dim=4, max_chunk_elements=12)
    search.batch_add(keys, np.arange(50))
    idxs, _ = search.batch_lookup(queries, k=4)
    assert max(n * m for n, m in distance.blocks) <= 12
    # Every query against every row, once.
    assert sum(n * m for n, m in distance.blocks) == 23 * 50
    np.testing.assert_array_equal(idxs, knn_loop("manhattan", queries, keys, np.arange(50), 4)[0])


def test_many_single_adds_grow_the_index():
    rng = np.random.default_rng(2)
    keys = rng.normal(size=(100, 3))
    search = LinearSearch("euclidean", dim=3)
    for i, key in enumerate(keys):
        search.add(key, 500 + i)
    assert search.size() == 100
    idxs, distances = search.batch_lookup(keys, k=1)
    np.testing.assert_array_equal(idxs[:, 0], 500 + np.arange(100))
    np.testing.assert_allclose(distances[:, 0], 0.0, atol=1e-3)


def test_config_round_trip():
    search = LinearSearch("l2", dim=5, max_chunk_elements=99, name="mine")
    config = search.get_config()
    assert config == {
        "distance": "euclidean",
        "dim": 5,
        "name": "mine",
        "verbose": 0,
        "max_chunk_elements": 99,
    }
    assert LinearSearch.from_config(config).get_config() == config


@pytest.mark.parametrize("distance", ["euclidean", "squared_euclidean"])
def test_euclidean_distances_are_exact_near_zero(distance):
    """Far from the origin, a row's distance to itself is 0 and a close one's is right."""
    rng = np.random.default_rng(4)
    keys = (30.0 + rng.normal(size=(50, 16))).astype("float32")
    near = keys[7] + np.float32(1e-3)
    search = LinearSearch(distance, dim=16)
    search.batch_add(keys, np.arange(50))
    idxs, distances = search.batch_lookup(np.stack([keys[3], near]), k=2)
    assert idxs[0, 0] == 3 and idxs[1, 0] == 7
    expected = np.sqrt(16) * 1e-3
    expected = expected if distance == "euclidean" else expected**2
    assert distances[0, 0] == 0.0
    np.testing.assert_allclose(distances[1, 0], expected, rtol=1e-2)


@pytest.mark.parametrize("distance", ["cosine", "inner_product", "euclidean", "manhattan"])
def test_many_small_adds_answer_exactly_as_one_batch_add(distance):
    rng = np.random.default_rng(5)
    keys = rng.normal(size=(90, 6)).astype("float32")
    queries = rng.normal(size=(11, 6)).astype("float32")
    ids = rng.permutation(10_000)[:90]
    whole = LinearSearch(distance, dim=6)
    whole.batch_add(keys, ids)
    pieces = LinearSearch(distance, dim=6)
    bounds = [0, 1, 2, 5, 13, 14, 30, 31, 60, 89, 90]
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        if stop - start == 1:
            pieces.add(keys[start], int(ids[start]))
        else:
            pieces.batch_add(keys[start:stop], ids[start:stop])
        # Lookups between adds merge the chunks so far; later adds append to the merged one.
        if start in (2, 30):
            pieces.batch_lookup(queries, k=2)
    want, got = whole.batch_lookup(queries, k=7), pieces.batch_lookup(queries, k=7)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], knn_loop(distance, queries, keys, ids, 7)[0])


def test_an_add_converts_no_rows_to_tensors(monkeypatch):
    """Adding to a large index makes no tensor: the rows stay in one NumPy array."""
    search = LinearSearch("euclidean", dim=4)
    search.batch_add(np.ones((1000, 4)), np.arange(1000))
    converted = []
    real_constant = tf.constant
    monkeypatch.setattr(
        tf,
        "constant",
        lambda value, *a, **kw: converted.append(np.shape(value)) or real_constant(value, *a, **kw),
    )
    for i in range(5):
        search.add(np.full(4, float(i + 1)), 1000 + i)
    assert converted == []
    idxs, _ = search.lookup(np.array([5.0, 5.0, 5.0, 5.0]), k=1)
    assert search.size() == 1005 and idxs.tolist() == [1004]


def _saved_with(tmp_path, change):
    """Saves a 6-row search and rewrites its file's arrays with `change`."""
    search = LinearSearch("l2", dim=3)
    search.batch_add(np.arange(18, dtype=np.float32).reshape(6, 3), list(range(6)))
    search.save(tmp_path)
    with np.load(tmp_path / "linear_search.npz") as npz:
        arrays = {key: npz[key] for key in ("config", "idxs")}
    arrays["embeddings"] = np.load(tmp_path / "linear_search_embeddings.npy")
    # Written as version 1 (the embeddings inside), which still loads when well formed.
    write_npz(tmp_path / "linear_search.npz", change(arrays), kind="LinearSearch", format_version=1)


def _with_nan_rows(arrays):
    embeddings = arrays["embeddings"].copy()
    embeddings[[1, 4]] = [np.nan, np.inf, 0.0]
    return {**arrays, "embeddings": embeddings}


@pytest.mark.parametrize(
    "change, match",
    [
        (_with_nan_rows, "holds 2 embeddings with NaN or infinite values .*first is row 1"),
        (lambda arrays: {**arrays, "idxs": arrays["idxs"].astype(np.float64)}, "inconsistent"),
    ],
    ids=["nan-rows", "float-ids"],
)
def test_load_refuses_a_file_no_search_could_have_saved_and_changes_nothing(
    tmp_path, change, match
):
    _saved_with(tmp_path, change)
    target = LinearSearch("l2", dim=3)
    target.batch_add(np.ones((2, 3)), [7, 8])
    with pytest.raises(ValueError, match=match):
        target.load(tmp_path)
    assert target.ids().tolist() == [7, 8]
    assert target.lookup(np.ones(3), k=1)[0] in (7, 8)


def test_a_version_1_file_loads_and_answers_as_saved(tmp_path):
    _saved_with(tmp_path, lambda arrays: arrays)
    target = LinearSearch("l2", dim=3)
    target.load(tmp_path)
    want = np.arange(18, dtype=np.float32).reshape(6, 3)
    idxs, distances = target.lookup(want[4] + 0.5, k=2)
    assert idxs.tolist() == [4, 5]
    np.testing.assert_allclose(distances, [np.sqrt(0.75), np.linalg.norm(want[4] + 0.5 - want[5])])


def test_ids_and_saved_files():
    search = LinearSearch("l2", dim=2)
    search.batch_add(np.ones((3, 2)), [4, 2, 9])
    ids = search.ids()
    assert ids.tolist() == [4, 2, 9] and not ids.flags.writeable
    assert search.saved_files() == ["linear_search.npz", "linear_search_embeddings.npy"]
