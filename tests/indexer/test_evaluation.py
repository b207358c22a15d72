"""The index's measuring verbs on neighbour matrices give what they gave on `Lookup`s.

The references are the `Lookup` path itself (`batch_lookup`, then
`MemoryEvaluator` unpacking the `Lookup`s), the old per-row `batch_lookup`
rebuilt here, and plain Python loops over the `Lookup`s in float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tensorflow_similarity.classification_metrics import make_classification_metric
from tensorflow_similarity.evaluators import MemoryEvaluator
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.indexer._checks import as_label
from tensorflow_similarity.matchers import make_classification_matcher
from tensorflow_similarity.retrieval_metrics import (
    BNDCG,
    MapAtK,
    MapAtR,
    PrecisionAtK,
    RecallAtK,
    RPrecision,
)
from tensorflow_similarity.types import Lookup, unpack_lookup_distances, unpack_lookup_labels

DIM = 4


def _data(seed=0, n=30, classes=3):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, size=n)
    centres = np.random.default_rng(7).normal(size=(classes, DIM)) * 2.0
    return (centres[labels] + rng.normal(size=(n, DIM))).astype(np.float32), labels


def _index(x, y, distance="cosine"):
    index = Indexer(embedding_size=DIM, distance=distance)
    index.batch_add(x, y, data=[f"d{i}" for i in range(len(x))], verbose=0)
    return index


def _metrics(y):
    r = {int(c): int(n) for c, n in zip(*np.unique(y, return_counts=True), strict=True)}
    return [
        RecallAtK(k=1),
        RecallAtK(k=3, average="macro"),
        PrecisionAtK(k=4, drop_closest_lookup=True),
        PrecisionAtK(k=3, distance_threshold=0.5),
        MapAtK(k=5, r=r),
        BNDCG(k=4, distance_threshold=0.3),
        RPrecision(r=r, drop_closest_lookup=True),
        MapAtR(r=r, drop_closest_lookup=True),
    ]


def _reference_retrieval(index, x, y, metrics):
    """What `evaluate_retrieval` computed before: `Lookup`s through `MemoryEvaluator`."""
    k = max(metric.k for metric in metrics)
    k = min(k + 1, max(index.size(), k))
    lookups = index.batch_lookup(x, k=k, verbose=0)
    return MemoryEvaluator().evaluate_retrieval(y, lookups, metrics)


def _reference_calibrate(index, x, y, k=1, matcher="match_nearest", rounding=2):
    return MemoryEvaluator().calibrate(
        target_labels=y,
        lookups=index.batch_lookup(x, k=k, verbose=0),
        thresholds_targets={"0.5": 0.5, "0.9": 0.9},
        calibration_metric=make_classification_metric("f1_score"),
        matcher=make_classification_matcher(matcher),
        extra_metrics=[make_classification_metric(m) for m in ("precision", "recall")],
        metric_rounding=rounding,
        verbose=0,
    )


def _assert_same_calibration(got, want):
    assert got.cutpoints == want.cutpoints
    assert list(got.thresholds) == list(want.thresholds)
    for name, values in want.thresholds.items():
        assert got.thresholds[name].dtype == values.dtype
        np.testing.assert_array_equal(got.thresholds[name], values)


def _with_missing(index, monkeypatch, missing):
    """Makes the search report neighbour ids -1 (not found) where `missing(idxs)` is True."""
    search = index.search.batch_lookup

    def batch_lookup(embeddings, k):
        idxs, distances = search(embeddings, k=k)
        idxs, distances = np.array(idxs), np.array(distances)
        hole = np.broadcast_to(missing(idxs), idxs.shape)
        idxs[hole], distances[hole] = -1, np.float32(3.0)
        return idxs, distances

    monkeypatch.setattr(index.search, "batch_lookup", batch_lookup)


@pytest.mark.parametrize("distance", ["cosine", "l2"])
def test_retrieval_metrics_are_those_of_the_lookups_bit_for_bit(distance):
    x, y = _data()
    index = _index(x, y, distance)
    queries, query_labels = _data(seed=1, n=12)
    metrics = _metrics(y)
    assert index.evaluate_retrieval(queries, query_labels, metrics, verbose=0) == (
        _reference_retrieval(index, queries, query_labels, metrics)
    )


def test_retrieval_metrics_match_python_loops_over_the_lookups():
    x, y = _data()
    index = _index(x, y)
    queries, labels = _data(seed=2, n=10)
    got = index.evaluate_retrieval(
        queries, labels, [RecallAtK(k=2), PrecisionAtK(k=3), BNDCG(k=3)], verbose=0
    )
    lookups = index.batch_lookup(queries, k=4, verbose=0)
    recall = precision = ndcg = 0.0
    for label, row in zip(labels, lookups, strict=True):
        relevant = [float(lookup.label == label) for lookup in row]
        recall += float(any(relevant[:2]))
        precision += sum(relevant[:3]) / 3
        dcg = sum(rel / math.log2(j + 2) for j, rel in enumerate(relevant[:3]))
        ideal = sum(rel / math.log2(j + 2) for j, rel in enumerate(sorted(relevant[:3])[::-1]))
        ndcg += dcg / ideal if ideal else 0.0
    assert got["recall@2"] == pytest.approx(recall / len(labels), abs=1e-12)
    assert got["precision@3"] == pytest.approx(precision / len(labels), abs=1e-12)
    assert got["ndcg@3"] == pytest.approx(ndcg / len(labels), abs=1e-12)


def test_ties_in_distance_and_labels_unseen_in_the_index():
    # Every example twice, with two labels: each query's neighbours tie in pairs.
    x, y = _data(n=10)
    index = _index(np.concatenate([x, x]), np.concatenate([y, y + 10]))
    queries = np.concatenate([x[:4], x[:2] + 0.5])
    labels = np.array([*y[:4], 99, 98])  # the last two: classes not in the index
    metrics = [RecallAtK(k=1), PrecisionAtK(k=4), MapAtK(k=4), RecallAtK(k=2, average="macro")]
    got = index.evaluate_retrieval(queries, labels, metrics, verbose=0)
    assert got == _reference_retrieval(index, queries, labels, metrics)
    single = index.evaluate_retrieval(queries[4:], labels[4:], [RecallAtK(k=4)], verbose=0)
    assert single == {"recall@4": 0.0}


@pytest.mark.parametrize(
    "missing",
    [
        pytest.param(
            lambda idxs: np.arange(idxs.shape[1]) >= max(idxs.shape[1] - 1, 1), id="at-end"
        ),
        pytest.param(lambda idxs: (np.arange(idxs.size) % 3 == 1).reshape(idxs.shape), id="holes"),
    ],
)
def test_fewer_neighbours_than_k_are_padded_as_the_lookups_are(monkeypatch, missing):
    x, y = _data()
    index = _index(x, y)
    _with_missing(index, monkeypatch, missing)
    queries, labels = _data(seed=3, n=9)
    metrics = [RecallAtK(k=2), PrecisionAtK(k=3), MapAtK(k=3), BNDCG(k=3, distance_threshold=2.0)]
    assert index.evaluate_retrieval(queries, labels, metrics, verbose=0) == (
        _reference_retrieval(index, queries, labels, metrics)
    )
    for k, matcher in [(1, "match_nearest"), (5, "match_majority_vote")]:
        _assert_same_calibration(
            index.calibrate(
                queries, labels, {"0.5": 0.5, "0.9": 0.9}, k=k, matcher=matcher, verbose=0
            ),
            _reference_calibrate(index, queries, labels, k=k, matcher=matcher),
        )


def test_a_metric_beyond_the_neighbours_found_is_refused_as_before(monkeypatch):
    x, y = _data()
    index = _index(x, y)
    _with_missing(index, monkeypatch, lambda idxs: np.arange(idxs.shape[1]) >= 2)
    queries, labels = _data(seed=3, n=4)
    with pytest.raises(ValueError, match="needs 4 neighbours per query but the lookups have 2"):
        index.evaluate_retrieval(queries, labels, [RecallAtK(k=4)], verbose=0)
    with pytest.raises(ValueError, match="needs 4 neighbours per query but the lookups have 2"):
        _reference_retrieval(index, queries, labels, [RecallAtK(k=4)])


@pytest.mark.parametrize(
    ("k", "matcher", "rounding"),
    [(1, "match_nearest", 2), (3, "match_majority_vote", 4), (40, "match_nearest", 6)],
)
def test_calibration_is_that_of_the_lookups(k, matcher, rounding):
    x, y = _data()
    index = _index(x, y)
    queries, labels = _data(seed=4, n=15)
    got = index.calibrate(
        queries,
        labels,
        {"0.5": 0.5, "0.9": 0.9},
        k=min(k, index.size()),
        matcher=matcher,
        rounding=rounding,
        verbose=0,
    )
    want = _reference_calibrate(
        index, queries, labels, k=min(k, index.size()), matcher=matcher, rounding=rounding
    )
    _assert_same_calibration(got, want)
    assert index.cutpoints == want.cutpoints


def test_match_and_classification_are_those_of_the_lookups(monkeypatch):
    x, y = _data()
    index = _index(x, y)
    _with_missing(index, monkeypatch, lambda idxs: np.arange(idxs.shape[1]) >= 2)
    queries, labels = _data(seed=5, n=8)
    index.calibrate(queries, labels, {"0.5": 0.5}, verbose=0)
    lookups = index.batch_lookup(queries, k=3, verbose=0)
    matcher = make_classification_matcher("match_majority_vote")
    want_labels, want_distances = matcher.derive_match(
        lookup_labels=unpack_lookup_labels(lookups),
        lookup_distances=unpack_lookup_distances(lookups),
    )
    got = index.match(queries, k=3, matcher="match_majority_vote")
    for name, cutpoint in index.cutpoints.items():
        assert got[name] == [
            int(label) if distance <= cutpoint["distance"] else -1
            for label, distance in zip(np.ravel(want_labels), np.ravel(want_distances), strict=True)
        ]
    thresholds = [0.1, 0.5, 1.0]
    got = index.evaluate_classification(queries, labels, thresholds, k=3, verbose=0)
    want = MemoryEvaluator().evaluate_classification(
        labels,
        unpack_lookup_labels(lookups),
        unpack_lookup_distances(lookups),
        np.asarray(thresholds, np.float32),
        [make_classification_metric("f1")],
        "match_nearest",
    )
    assert list(got) == list(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def _old_batch_lookup(index, queries, k):
    """`batch_lookup` as it was: one store read and one `Lookup` per neighbour, per row."""
    idxs, distances = index.search.batch_lookup(queries, k=k)
    lookups = []
    for row_idxs, row_distances in zip(np.asarray(idxs), np.asarray(distances), strict=True):
        found = row_idxs >= 0
        row_idxs, row_distances = row_idxs[found], row_distances[found]
        embeddings, labels, data = index.kv_store.batch_get([int(i) for i in row_idxs])
        lookups.append(
            [
                Lookup(
                    rank=rank + 1,
                    distance=float(row_distances[rank]),
                    label=as_label(labels[rank]),
                    embedding=embeddings[rank],
                    data=data[rank],
                    id=int(row_idxs[rank]),
                )
                for rank in range(len(row_idxs))
            ]
        )
    return lookups


def test_batch_lookup_returns_the_lookups_it_returned_before(monkeypatch):
    x, y = _data()
    index = _index(x, y)
    _with_missing(
        index, monkeypatch, lambda idxs: (np.arange(idxs.size) % 4 == 2).reshape(idxs.shape)
    )
    queries, _ = _data(seed=6, n=7)
    got = index.batch_lookup(queries, k=5, verbose=0)
    want = _old_batch_lookup(index, queries, k=5)
    assert got == want
    assert all(type(lookup.distance) is float for row in got for lookup in row)
    assert all(type(lookup.label) is int for row in got for lookup in row)


def test_lookup_statistics_count_the_queries_on_every_path():
    x, y = _data()
    index = _index(x, y)
    queries, labels = _data(seed=7, n=6)
    index.evaluate_retrieval(queries, labels, [RecallAtK(k=1)], verbose=0)
    index.calibrate(queries, labels, {}, verbose=0)
    index.batch_lookup(queries, k=2, verbose=0)
    assert index.stats()["num_lookups"] == 18


def test_an_evaluator_overriding_a_verb_is_given_the_lookups():
    seen = []

    class Recording(MemoryEvaluator):
        def evaluate_retrieval(self, target_labels, lookups, retrieval_metrics, **kwargs):
            seen.append(lookups)
            return super().evaluate_retrieval(target_labels, lookups, retrieval_metrics, **kwargs)

        def calibrate(self, target_labels, lookups, *args, **kwargs):
            seen.append(lookups)
            return super().calibrate(target_labels, lookups, *args, **kwargs)

    x, y = _data()
    index = Indexer(embedding_size=DIM, evaluator=Recording())
    index.batch_add(x, y, verbose=0)
    queries, labels = _data(seed=8, n=5)
    metrics = [RecallAtK(k=2)]
    assert index.evaluate_retrieval(queries, labels, metrics, verbose=0) == (
        _reference_retrieval(index, queries, labels, metrics)
    )
    index.calibrate(queries, labels, {"0.5": 0.5}, verbose=0)
    assert len(seen) == 2 and all(isinstance(rows[0][0], Lookup) for rows in seen)


def test_an_empty_index_is_refused():
    index = Indexer(embedding_size=DIM)
    queries, labels = _data(n=3)
    with pytest.raises(ValueError, match="The index is empty"):
        index.evaluate_retrieval(queries, labels, [RecallAtK(k=1)], verbose=0)
    with pytest.raises(ValueError, match="The index is empty"):
        index.calibrate(queries, labels, {"0.5": 0.5}, verbose=0)


def test_no_queries_are_refused_as_before():
    x, y = _data()
    index = _index(x, y)
    empty = np.zeros((0, DIM), np.float32)
    with pytest.raises(ValueError, match="needs 1 neighbours per query but the lookups have 0"):
        index.evaluate_retrieval(empty, np.zeros(0, np.int64), [RecallAtK(k=1)], verbose=0)
    with pytest.raises(ValueError, match="calibrate needs lookups of at least one query"):
        index.calibrate(empty, np.zeros(0, np.int64), {"0.5": 0.5}, verbose=0)


def test_neighbours_without_labels_are_refused_as_before():
    x, _ = _data(n=6)
    index = Indexer(embedding_size=DIM)
    index.batch_add(x, verbose=0)
    with pytest.raises(ValueError, match="A neighbour has no label"):
        index.evaluate_retrieval(x, np.zeros(6, np.int64), [RecallAtK(k=1)], verbose=0)
    with pytest.raises(ValueError, match="A neighbour has no label"):
        index.calibrate(x, np.zeros(6, np.int64), {"0.5": 0.5}, verbose=0)
