"""Indexer: lookups, evaluation, calibration and matching against float64 NumPy loops."""

from __future__ import annotations

import collections
import gc
import json
import warnings

import numpy as np
import pytest

from tensorflow_similarity.indexer import METADATA_FILE, Indexer
from tensorflow_similarity.retrieval_metrics import RecallAtK
from tensorflow_similarity.search import LinearSearch
from tensorflow_similarity.stores import MemmapStore, MemoryStore
from tensorflow_similarity.types import Lookup
from tests.stores.test_memory_store import write_poisoned_store

DIM = 5


def _data(seed=0, n=40, classes=4):
    """Examples around 4 fixed class centres; `seed` draws the examples."""
    centres = np.random.default_rng(100).normal(size=(classes, DIM)) * 2.0
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    return (centres[labels] + rng.normal(size=(n, DIM))).astype(np.float32), labels


def _distances(query, keys, distance):
    """Float64 loops: every query against every key."""
    out = np.zeros((len(query), len(keys)))
    for i, q in enumerate(query.astype(np.float64)):
        for j, key in enumerate(keys.astype(np.float64)):
            if distance == "cosine":
                out[i, j] = 1.0 - q @ key / (np.linalg.norm(q) * np.linalg.norm(key))
            else:
                out[i, j] = np.sqrt(np.sum((q - key) ** 2))
    return out


def _filled(distance="cosine", seed=0, n=40, search="linear"):
    x, y = _data(seed, n)
    index = Indexer(embedding_size=DIM, distance=distance, search=search)
    index.batch_add(x, labels=y, data=[f"item{i}" for i in range(n)], verbose=0)
    return index, x, y


def _state(index):
    embeddings, labels, data = index.kv_store.batch_get(list(range(index.size())))
    return index.size(), np.asarray(embeddings).tolist(), list(labels), list(data)


@pytest.mark.parametrize("search", ["linear", "faiss"])
@pytest.mark.parametrize("distance", ["cosine", "l2"])
def test_batch_lookup_is_the_loop_nearest_neighbours(distance, search):
    if search == "faiss":
        pytest.importorskip("faiss")
    index, x, y = _filled(distance, search=search)
    queries, _ = _data(seed=1, n=7)
    lookups = index.batch_lookup(queries, k=6, verbose=0)
    reference = _distances(queries, x, distance)
    for row, lookup in zip(reference, lookups, strict=True):
        order = np.argsort(row, kind="stable")[:6]
        assert [n.rank for n in lookup] == [1, 2, 3, 4, 5, 6]
        assert [n.data for n in lookup] == [f"item{i}" for i in order]
        assert [n.label for n in lookup] == y[order].tolist()
        assert all(type(n.label) is int for n in lookup)
        np.testing.assert_allclose([n.distance for n in lookup], row[order], atol=1e-5)
        np.testing.assert_array_equal(np.stack([n.embedding for n in lookup]), x[order])


def test_single_add_and_lookup_agree_with_batches():
    x, y = _data()
    single = Indexer(embedding_size=DIM)
    for embedding, label in zip(x, y, strict=True):
        single.add(embedding[None], label=label, verbose=0)
    batch, _, _ = _filled()
    assert single.single_lookup(x[3], k=4) == [
        Lookup(n.rank, n.distance, n.label, n.embedding, None, n.id)
        for n in batch.batch_lookup(x[3:4], k=4, verbose=0)[0]
    ]


def _reference_calibration(distances, nearest, labels, rounding):
    """F1, precision and recall of match-nearest at each distinct distance, by loops.

    Distances are rounded to 8 decimals first, as 0.17's calibration does.
    """
    distances = np.round(distances, 8)
    thresholds = np.unique(distances)
    rows = []
    for t in thresholds:
        tp = fp = fn = 0
        for d, match, label in zip(distances, nearest, labels, strict=True):
            if match == label:
                tp, fn = (tp + 1, fn) if d <= t else (tp, fn + 1)
            elif d <= t:
                fp += 1
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append([round(v, rounding) for v in (f1, precision, recall)])
    return thresholds, np.array(rows)


def test_calibrate_and_match_follow_the_loop_reference():
    index, x, y = _filled("l2", n=60)
    queries, query_labels = _data(seed=2, n=30)
    results = index.calibrate(
        queries,
        query_labels,
        thresholds_targets={"0.5": 0.5},
        calibration_metric="f1",
        rounding=6,
        verbose=0,
    )
    reference = _distances(queries, x, "l2")
    nearest = reference.argmin(axis=1)
    distances = reference[np.arange(len(queries)), nearest]
    thresholds, rows = _reference_calibration(distances, y[nearest], query_labels, 6)
    np.testing.assert_allclose(results.thresholds["distance"], thresholds, atol=1e-5)
    np.testing.assert_allclose(results.thresholds["f1"], rows[:, 0], atol=2e-6)
    np.testing.assert_allclose(results.thresholds["precision"], rows[:, 1], atol=2e-6)
    np.testing.assert_allclose(results.thresholds["recall"], rows[:, 2], atol=2e-6)
    best = len(rows) - 1 - np.argmax(rows[::-1, 0])
    optimal = results.cutpoints["optimal"]
    assert optimal["name"] == "optimal"
    assert optimal["value"] == pytest.approx(rows[best, 0], abs=2e-6)
    assert optimal["distance"] == pytest.approx(thresholds[best], abs=1e-5)
    # The first threshold reaching the target for an increasing metric, else the last.
    reached = np.flatnonzero(rows[:, 0] >= 0.5)
    target = reached[0] if index.calibration_metric.increasing else reached[-1]
    assert results.cutpoints["0.5"]["distance"] == pytest.approx(thresholds[target], abs=1e-5)
    assert index.is_calibrated and set(index.cutpoints) == {"optimal", "0.5"}

    matches = index.match(queries, no_match_label=-7, verbose=0)
    # A cutpoint is one of the index's own (float32) distances: a query at the cutpoint is
    # matched, so the rule is applied to the distances the index measured.
    measured = [lookups[0].distance for lookups in index.batch_lookup(queries, k=1, verbose=0)]
    np.testing.assert_allclose(measured, distances, rtol=1e-5, atol=1e-6)
    for name, cutpoint in index.cutpoints.items():
        expected = [
            int(y[n]) if d <= cutpoint["distance"] else -7
            for n, d in zip(nearest, measured, strict=True)
        ]
        assert matches[name] == expected


def test_evaluate_retrieval_recall_is_the_loop_fraction():
    index, x, y = _filled("cosine", n=50)
    queries, labels = _data(seed=3, n=20)
    results = index.evaluate_retrieval(queries, labels, [RecallAtK(k=1), RecallAtK(k=5)], verbose=0)
    order = np.argsort(_distances(queries, x, "cosine"), axis=1, kind="stable")
    for k in (1, 5):
        expected = np.mean([labels[i] in y[order[i, :k]] for i in range(len(queries))])
        assert results[f"recall@{k}"] == pytest.approx(expected)


@pytest.mark.parametrize("search", ["linear", "faiss"])
def test_save_and_load_round_trip(tmp_path, search):
    if search == "faiss":
        pytest.importorskip("faiss")
    index, x, y = _filled("l2", search=search)
    queries, labels = _data(seed=4, n=10)
    index.calibrate(queries, labels, thresholds_targets={}, verbose=0)
    before = index.batch_lookup(queries, k=3, verbose=0)
    index.save(tmp_path)
    loaded = Indexer.load(tmp_path, verbose=0)
    assert loaded.distance.name == "euclidean" and loaded.size() == index.size()
    assert type(loaded.search) is type(index.search)
    assert loaded.batch_lookup(queries, k=3, verbose=0) == before
    assert loaded.is_calibrated and loaded.cutpoints == index.cutpoints
    assert loaded.match(queries, verbose=0) == index.match(queries, verbose=0)
    np.testing.assert_array_equal(
        loaded.calibration_thresholds["distance"], index.calibration_thresholds["distance"]
    )


def _memmap_index(folder, search="linear"):
    x, y = _data(seed=0, n=40)
    index = Indexer(embedding_size=DIM, distance="l2", search=search, kv_store=MemmapStore(folder))
    index.batch_add(x, labels=y, data=np.arange(40 * 2).reshape(40, 2), verbose=0)
    return index


def test_a_memmap_store_reloads_as_a_memmap_store_on_the_saved_files(tmp_path):
    index = _memmap_index(tmp_path / "live")
    queries, _ = _data(seed=4, n=6)
    before = index.batch_lookup(queries, k=3, verbose=0)
    index.save(tmp_path / "saved")
    loaded = Indexer.load(tmp_path / "saved", verbose=0)
    assert type(loaded.kv_store) is MemmapStore
    assert loaded.kv_store.path == tmp_path / "saved"
    after = loaded.batch_lookup(queries, k=3, verbose=0)
    assert [[(n.label, n.distance, n.data.tolist()) for n in row] for row in after] == [
        [(n.label, n.distance, n.data.tolist()) for n in row] for row in before
    ]
    # Records added to the loaded index go to a private copy; saving there again keeps them.
    loaded.add(np.zeros(DIM, np.float32), label=9, data=np.array([-1, -1]))
    assert loaded.kv_store.path.parent == tmp_path and loaded.kv_store.path.name.startswith(
        ".saved.copy-"
    )
    loaded.save(tmp_path / "saved")
    again = Indexer.load(tmp_path / "saved", verbose=0)
    assert again.size() == 41 and again.kv_store.get(40)[1] == 9
    assert index.size() == 40 and MemmapStore(tmp_path / "live").size() == 40


def _records(index):
    embeddings, labels, data = index.kv_store.batch_get(list(range(index.size())))
    return embeddings.tolist(), labels, np.asarray(data).tolist()


def test_changing_a_memmap_index_loaded_in_place_leaves_the_saved_index_as_saved(tmp_path):
    _memmap_index(tmp_path / "live").save(tmp_path / "saved")
    saved_files = {f.name: f.read_bytes() for f in (tmp_path / "saved").iterdir()}
    original = _records(Indexer.load(tmp_path / "saved", verbose=0))
    loaded = Indexer.load(tmp_path / "saved", verbose=0)
    record = (np.zeros(DIM, np.float32), 9, np.array([-1, -1]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded.add(*record)
        loaded.add(*record)
    assert loaded.size() == 42 and loaded.kv_store.get(41)[1] == 9
    # Not saved: the saved folder loads as it was saved, byte for byte.
    assert {f.name: f.read_bytes() for f in (tmp_path / "saved").iterdir()} == saved_files
    assert _records(Indexer.load(tmp_path / "saved", verbose=0)) == original
    reset = Indexer.load(tmp_path / "saved", verbose=0)
    reset.reset()
    assert reset.size() == 0 and Indexer.load(tmp_path / "saved", verbose=0).size() == 40
    # Saved there again, the added records are kept; the private copy goes with its store.
    loaded.save(tmp_path / "saved")
    assert Indexer.load(tmp_path / "saved", verbose=0).size() == 42
    copies = list(tmp_path.glob(".saved.copy-*"))
    assert copies
    del loaded, reset
    gc.collect()
    assert not any(copy.exists() for copy in copies)


def test_a_memmap_index_loaded_into_another_folder_adds_without_a_warning(tmp_path):
    _memmap_index(tmp_path / "live").save(tmp_path / "saved")
    copy = Indexer.load(tmp_path / "saved", verbose=0, kv_store=MemmapStore(tmp_path / "copy"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copy.add(np.zeros(DIM, np.float32), label=9, data=np.array([-1, -1]))
    assert Indexer.load(tmp_path / "saved", verbose=0).size() == 40


def test_load_into_a_given_store_copies_the_records_there(tmp_path):
    _memmap_index(tmp_path / "live").save(tmp_path / "saved")
    copy = Indexer.load(tmp_path / "saved", verbose=0, kv_store=MemmapStore(tmp_path / "copy"))
    assert copy.kv_store.path == tmp_path / "copy" and copy.size() == 40
    copy.add(np.zeros(DIM, np.float32), label=9, data=np.array([-1, -1]))
    assert MemmapStore(tmp_path / "saved").size() == 40 and copy.size() == 41
    with pytest.raises(ValueError, match="only be read into a MemmapStore, not a MemoryStore"):
        Indexer.load(tmp_path / "saved", verbose=0, kv_store=MemoryStore())


def test_a_memory_store_reloads_as_a_memory_store_and_a_foreign_one_needs_an_instance(tmp_path):
    index, _, _ = _filled("l2")
    index.save(tmp_path / "memory")
    assert type(Indexer.load(tmp_path / "memory", verbose=0).kv_store) is MemoryStore

    class TaggedStore(MemoryStore):
        pass

    tagged = Indexer(embedding_size=DIM, distance="l2", kv_store=TaggedStore())
    tagged.batch_add(*_data(seed=0, n=5), verbose=0)
    tagged.save(tmp_path / "tagged")
    with pytest.raises(ValueError, match="class 'TaggedStore'.*kv_store=TaggedStore"):
        Indexer.load(tmp_path / "tagged", verbose=0)
    loaded = Indexer.load(tmp_path / "tagged", verbose=0, kv_store=TaggedStore())
    assert type(loaded.kv_store) is TaggedStore and loaded.size() == 5


def test_an_index_with_pickled_data_loads_only_with_safe_mode_off(tmp_path):
    x, y = _data(seed=0, n=6)
    index = Indexer(embedding_size=DIM, distance="l2")
    index.batch_add(x, labels=y, data=[{"id": i} for i in range(6)], verbose=0)
    with pytest.warns(UserWarning, match="pickled"):
        index.save(tmp_path / "saved")
    with pytest.raises(ValueError, match="Python objects.*safe_mode=False"):
        Indexer.load(tmp_path / "saved", verbose=0)
    loaded = Indexer.load(tmp_path / "saved", verbose=0, safe_mode=False)
    assert [loaded.kv_store.get(i)[2] for i in range(6)] == [{"id": i} for i in range(6)]

    marker = tmp_path / "payload-ran"
    write_poisoned_store(tmp_path / "saved", marker)
    with pytest.raises(ValueError, match="Python objects"):
        Indexer.load(tmp_path / "saved", verbose=0)
    assert not marker.exists()


def test_load_refuses_another_distance_dimension_or_version(tmp_path):
    index, _, _ = _filled("l2")
    index.save(tmp_path)
    with pytest.raises(ValueError, match="saved with distance 'euclidean', not 'cosine'"):
        Indexer.load(tmp_path, verbose=0, distance="cosine")
    with pytest.raises(ValueError, match=f"size {DIM}, not 7"):
        Indexer.load(tmp_path, verbose=0, embedding_size=7)
    metadata = json.loads((tmp_path / METADATA_FILE).read_text())
    (tmp_path / METADATA_FILE).write_text(json.dumps({**metadata, "format_version": 99}))
    with pytest.raises(ValueError, match="format version 99"):
        Indexer.load(tmp_path, verbose=0)
    (tmp_path / METADATA_FILE).write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        Indexer.load(tmp_path, verbose=0)
    with pytest.raises(FileNotFoundError, match="No saved index"):
        Indexer.load(tmp_path / "missing", verbose=0)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda i, x, y: i.batch_add(x[:, :3], labels=y), r"shape \[n, 5\]"),
        (lambda i, x, y: i.batch_add(x, labels=y[:-1]), "labels of shape"),
        (lambda i, x, y: i.batch_add(x, labels=y, data=[1]), "data items"),
        (lambda i, x, y: i.batch_add(x, labels=y.astype(float) + 0.5), "integers"),
        (lambda i, x, y: i.add(x[:2], label=0), "one embedding"),
        (lambda i, x, y: i.batch_lookup(x[:, :4], k=1), r"shape \[n, 5\]"),
        (lambda i, x, y: i.batch_lookup(x, k=0), "k must be"),
        (lambda i, x, y: i.calibrate(x, y[:3], {}, verbose=0), "target_labels of shape"),
        (lambda i, x, y: i.match(x), "not calibrated"),
        (lambda i, x, y: i.evaluate_retrieval(x, y, ["recall@1"]), "not a RetrievalMetric"),
    ],
)
def test_bad_input_is_refused_and_the_index_is_unchanged(call, message):
    index, x, y = _filled()
    before = _state(index)
    with pytest.raises(ValueError, match=message):
        call(index, x, y)
    assert _state(index) == before


@pytest.mark.parametrize("label", [1.9, True, "7", np.float32(2.0), 2.0, np.array([1.5])])
def test_add_refuses_a_label_that_is_not_an_integer_as_batch_add_does(label):
    index, x, _ = _filled()
    before = _state(index)
    with pytest.raises(ValueError, match="label must be an integer"):
        index.add(x[0], label=label)
    with pytest.raises(ValueError, match="must be integers"):
        index.batch_add(x[:1], labels=np.reshape(label, (1,)))
    assert _state(index) == before


@pytest.mark.parametrize("label", [7, np.int8(7), np.uint16(7), np.int64(7), np.array([7]), None])
def test_add_accepts_integer_labels_and_none(label):
    index, x, _ = _filled()
    index.add(x[0], label=label)
    stored = index.kv_store.get(index.size() - 1)[1]
    expected = None if label is None else 7
    assert stored == expected and type(stored) is type(expected)


def test_lookup_on_an_empty_index_says_so():
    index = Indexer(embedding_size=DIM)
    with pytest.raises(ValueError, match="index is empty"):
        index.batch_lookup(np.zeros((1, DIM)), k=1)
    assert index.size() == 0


def test_constructor_checks():
    with pytest.raises(ValueError, match="search must be one of"):
        Indexer(embedding_size=DIM, search="nmslib")
    with pytest.raises(ValueError, match="Unknown distance"):
        Indexer(embedding_size=DIM, distance="hamming")
    with pytest.raises(ValueError, match="dim=5"):
        Indexer(embedding_size=DIM, search=LinearSearch("cosine", dim=3))
    with pytest.raises(ValueError, match="distance='euclidean'"):
        Indexer(embedding_size=DIM, distance="l2", search=LinearSearch("cosine", dim=DIM))


def test_stats_reset_and_data_frame():
    index, x, _ = _filled()
    index.batch_lookup(x[:4], k=2, verbose=0)
    index.single_lookup(x[0], k=1)
    stats = index.stats()
    assert stats["num_lookups"] == 5 and stats["size"] == 40
    assert 0 < stats["query_performance"]["min"] <= stats["query_performance"]["max"]
    pytest.importorskip("pandas")
    frame = index.to_data_frame()
    assert len(frame) == 40 and list(frame["data"][:2]) == ["item0", "item1"]
    index.reset()
    assert index.size() == 0 and index.stats()["num_lookups"] == 0


class _ShortSearch(LinearSearch):
    """Exact search that, as faiss' approximate ones can, misses neighbours: query i finds i % k."""

    def _lookup(self, queries, k):
        idxs, distances = super()._lookup(queries, k)
        for row in range(len(idxs)):
            idxs[row, row % k :], distances[row, row % k :] = -1, np.inf
        return idxs, distances


def test_neighbours_a_search_did_not_find_are_left_out_and_have_no_vote():
    x, y = _data(seed=0, n=40)
    index = Indexer(embedding_size=DIM, distance="l2", search=_ShortSearch("l2", dim=DIM))
    index.batch_add(x, labels=y, verbose=0)
    queries, labels = _data(seed=7, n=12)
    k = 5
    lookups = index.batch_lookup(queries, k=k, verbose=0)
    order = np.argsort(_distances(queries, x, "l2"), axis=1, kind="stable")
    for row, lookup in enumerate(lookups):
        assert [n.rank for n in lookup] == list(range(1, row % k + 1))
        assert [n.label for n in lookup] == y[order[row, : row % k]].tolist()
    # A majority vote among the found neighbours only; none found: no match at any threshold.
    index.calibrate(queries, labels, {}, k=k, matcher="match_majority_vote", verbose=0)
    index.cutpoints["optimal"]["distance"] = 1e9
    matched = index.match(queries, k=k, matcher="match_majority_vote", verbose=0)["optimal"]
    for row, label in enumerate(matched):
        found = y[order[row, : row % k]].tolist()
        if not found:
            assert label == -1
            continue
        votes = collections.Counter(found)
        assert label == next(v for v in found if votes[v] == max(votes.values()))
