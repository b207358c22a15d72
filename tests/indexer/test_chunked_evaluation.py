"""The index's measuring verbs over queries in chunks: the same values, bounded memory.

References: plain Python loops in float64 over neighbours found by NumPy
brute force; the `Lookup` path (`batch_lookup`, then `MemoryEvaluator`),
which is what the verbs computed before they took chunks; and one chunk of
all the queries. Memory is read with `tracemalloc`, which traces NumPy's
allocations (the search's TensorFlow tensors are not traced, and are bounded
by `LinearSearch.max_chunk_elements` anyway).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tensorflow_similarity.classification_metrics import make_classification_metric
from tensorflow_similarity.evaluators import MemoryEvaluator
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.matchers import make_classification_matcher
from tensorflow_similarity.retrieval_metrics import MapAtR, PrecisionAtK, RecallAtK, RetrievalMetric
from tensorflow_similarity.types import unpack_lookup_distances, unpack_lookup_labels

DIM = 4
CLASSES = 3
WHOLE = 10**9  # a chunk_size that takes every query at once


def _data(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=n)
    centres = np.random.default_rng(7).normal(size=(CLASSES, DIM)) * 1.5
    return (centres[labels] + rng.normal(size=(n, DIM))).astype(np.float32), labels


@pytest.fixture(scope="module")
def indexed():
    x, y = _data(40, seed=0)
    index = Indexer(embedding_size=DIM, distance="l2")
    index.batch_add(x, y, verbose=0)
    queries, labels = _data(23, seed=1)
    return index, x, y, queries, labels


def _class_sizes(y):
    return {int(c): int(n) for c, n in zip(*np.unique(y, return_counts=True), strict=True)}


def _brute_force_labels(x, y, queries):
    """Each query's indexed labels by increasing float64 Euclidean distance."""
    rows = []
    for query in queries.astype(np.float64):
        distances = [float(np.sqrt(np.sum((query - e) ** 2))) for e in x.astype(np.float64)]
        rows.append([int(y[j]) for j in np.argsort(distances, kind="stable")])
    return rows


def _loop_metrics(x, y, queries, labels):
    """recall@1, macro recall@3, precision@4 and mAP@R with plain loops over the neighbours."""
    rows = _brute_force_labels(x, y, queries)
    sizes = _class_sizes(y)
    recall1, precision4, map_r = [], [], []
    per_class = {}
    for label, row in zip(labels.tolist(), rows, strict=True):
        relevant = [neighbour == label for neighbour in row]
        recall1.append(1.0 if relevant[0] else 0.0)
        per_class.setdefault(label, []).append(1.0 if any(relevant[:3]) else 0.0)
        precision4.append(sum(relevant[:4]) / 4)
        r = sizes[label]
        hits, average_precision = 0, 0.0
        for rank in range(1, r + 1):
            if relevant[rank - 1]:
                hits += 1
                average_precision += hits / rank
        map_r.append(average_precision / r)
    return {
        "recall@1": sum(recall1) / len(recall1),
        "recall@3": sum(sum(v) / len(v) for v in per_class.values()) / len(per_class),
        "precision@4": sum(precision4) / len(precision4),
        "map@r": sum(map_r) / len(map_r),
    }


def _metrics(y):
    return [
        RecallAtK(k=1),
        RecallAtK(k=3, average="macro"),
        PrecisionAtK(k=4),
        MapAtR(r=_class_sizes(y)),
    ]


@pytest.mark.parametrize("chunk_size", [1, 5, 23])
def test_retrieval_in_chunks_is_that_of_loops_of_lookups_and_of_one_chunk(indexed, chunk_size):
    index, x, y, queries, labels = indexed
    metrics = _metrics(y)
    got = index.evaluate_retrieval(queries, labels, metrics, verbose=0, chunk_size=chunk_size)
    loops = _loop_metrics(x, y, queries, labels)
    assert list(got) == [metric.name for metric in metrics] == list(loops)
    for name, value in loops.items():
        assert got[name] == pytest.approx(value, abs=1e-12)
    one_chunk = index.evaluate_retrieval(queries, labels, metrics, verbose=0, chunk_size=WHOLE)
    k = min(max(metric.k for metric in metrics) + 1, index.size())
    lookups = MemoryEvaluator().evaluate_retrieval(
        labels, index.batch_lookup(queries, k=k, verbose=0), metrics
    )
    assert one_chunk == lookups
    for name, value in one_chunk.items():
        assert got[name] == pytest.approx(value, abs=1e-12)


def _loop_calibration(index, queries, labels, rounding):
    """Every distinct nearest distance as a threshold, F1 there, and the optimal cutpoint."""
    lookups = index.batch_lookup(queries, k=1, verbose=0)
    nearest = [(row[0].label, float(np.float32(round(row[0].distance, 8)))) for row in lookups]
    thresholds = sorted({distance for _, distance in nearest})
    pairs = [(lab, d, lab == q) for (lab, d), q in zip(nearest, labels.tolist(), strict=True)]
    f1 = []
    for threshold in thresholds:
        tp = sum(1 for _, d, right in pairs if right and d <= threshold)
        fp = sum(1 for _, d, right in pairs if not right and d <= threshold)
        fn = sum(1 for _, d, right in pairs if right and d > threshold)
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        score = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        f1.append(round(score, rounding))
    best = max(f1)
    optimal = max(i for i, value in enumerate(f1) if value == best)
    return thresholds, f1, thresholds[optimal]


@pytest.mark.parametrize("chunk_size", [1, 6])
def test_calibration_in_chunks_is_that_of_loops_of_lookups_and_of_one_chunk(indexed, chunk_size):
    index, _, _, queries, labels = indexed
    targets = {"0.5": 0.5, "0.9": 0.9}
    got = index.calibrate(queries, labels, targets, rounding=4, verbose=0, chunk_size=chunk_size)
    thresholds, f1, optimal = _loop_calibration(index, queries, labels, rounding=4)
    assert got.thresholds["distance"].tolist() == thresholds
    assert got.thresholds["value"].tolist() == pytest.approx(f1, abs=1e-12)
    assert got.cutpoints["optimal"]["distance"] == optimal
    want = MemoryEvaluator().calibrate(
        target_labels=labels,
        lookups=index.batch_lookup(queries, k=1, verbose=0),
        thresholds_targets=targets,
        calibration_metric=make_classification_metric("f1_score"),
        matcher=make_classification_matcher("match_nearest"),
        extra_metrics=[make_classification_metric(m) for m in ("precision", "recall")],
        metric_rounding=4,
        verbose=0,
    )
    one_chunk = index.calibrate(queries, labels, targets, rounding=4, verbose=0, chunk_size=WHOLE)
    for result in (want, one_chunk):
        assert got.cutpoints == result.cutpoints
        assert list(got.thresholds) == list(result.thresholds)
        for name, values in result.thresholds.items():
            assert got.thresholds[name].dtype == values.dtype
            np.testing.assert_array_equal(got.thresholds[name], values)


def _with_missing_beyond_first(index, monkeypatch, rows):
    """The search finds only the nearest neighbour (faiss' -1 after it) of queries `rows`."""
    search = index.search.batch_lookup
    seen = [0]

    def batch_lookup(embeddings, k):
        idxs, distances = (np.array(a) for a in search(embeddings, k=k))
        numbers = np.arange(seen[0], seen[0] + len(idxs))
        seen[0] += len(idxs)
        hole = np.isin(numbers, rows)[:, np.newaxis] & (np.arange(idxs.shape[1]) >= 1)
        idxs[hole], distances[hole] = -1, np.float32(3.0)
        return idxs, distances

    monkeypatch.setattr(index.search, "batch_lookup", batch_lookup)
    return seen


def _loop_majority(labels_row, distances_row):
    votes = {}
    for label, distance in zip(labels_row, distances_row, strict=True):
        if np.isfinite(distance):
            votes[label] = votes.get(label, 0) + 1
    best = max(votes.values())
    winner = next(label for label in labels_row if votes.get(label) == best)
    found = [d for d in distances_row if np.isfinite(d)]
    return winner, sum(found) / len(found)


def test_classification_in_chunks_with_short_rows_is_that_of_loops(indexed, monkeypatch):
    index, _, _, queries, labels = indexed
    # Queries 0-4 (a whole chunk of 5) and 12 have one neighbour; the others three.
    seen = _with_missing_beyond_first(index, monkeypatch, [0, 1, 2, 3, 4, 12])
    lookups = index.batch_lookup(queries, k=3, verbose=0)
    lookup_labels = unpack_lookup_labels(lookups)
    lookup_distances = unpack_lookup_distances(lookups)
    thresholds = [0.5, 1.0, 1.5, 2.0, 4.0]
    results = {}
    for chunk_size in (5, WHOLE):
        seen[0] = 0
        results[chunk_size] = index.evaluate_classification(
            queries,
            labels,
            thresholds,
            metrics=["precision", "recall", "f1"],
            matcher="match_majority_vote",
            k=3,
            verbose=0,
            chunk_size=chunk_size,
        )
    want = MemoryEvaluator().evaluate_classification(
        labels,
        lookup_labels,
        lookup_distances,
        np.asarray(thresholds, np.float32),
        [make_classification_metric(m) for m in ("precision", "recall", "f1")],
        "match_majority_vote",
    )
    for got in results.values():
        assert list(got) == list(want)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    matches = [
        _loop_majority(row_labels.tolist(), row_distances.tolist())
        for row_labels, row_distances in zip(lookup_labels, lookup_distances, strict=True)
    ]
    for position, threshold in enumerate(thresholds):
        pairs = list(zip(matches, labels.tolist(), strict=True))
        tp = sum(lab == q and d <= threshold for (lab, d), q in pairs)
        fn = sum(lab == q and d > threshold for (lab, d), q in pairs)
        assert results[5]["recall"][position] == pytest.approx(tp / (tp + fn), abs=1e-12)


def test_a_bad_chunk_size_is_refused_before_any_search(indexed, monkeypatch):
    index, _, _, queries, labels = indexed

    def no_search(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(index.search, "batch_lookup", no_search)
    for chunk_size in (0, -3, 2.5):
        with pytest.raises(ValueError, match="chunk_size"):
            index.evaluate_retrieval(
                queries, labels, [RecallAtK(k=1)], verbose=0, chunk_size=chunk_size
            )
        with pytest.raises(ValueError, match="chunk_size"):
            index.evaluate_classification(queries, labels, [0.5], chunk_size=chunk_size)
        with pytest.raises(ValueError, match="chunk_size"):
            index.calibrate(queries, labels, {}, verbose=0, chunk_size=chunk_size)


class _SumOfHits(RetrievalMetric):
    """A 0.17-style metric overriding `compute`: not a mean over the queries."""

    def compute(self, *, query_labels, lookup_labels=None, lookup_distances=None, match_mask=None):
        self.rows = len(query_labels)
        return float(np.sum(np.asarray(match_mask)[:, : self.k]))


def test_a_metric_overriding_compute_is_given_all_the_queries_at_once(indexed):
    index, _, y, queries, labels = indexed
    metric = _SumOfHits(name="hits", k=2)
    got = index.evaluate_retrieval(
        queries, labels, [metric, RecallAtK(k=1)], verbose=0, chunk_size=4
    )
    assert metric.rows == len(queries)
    rows = index.batch_lookup(queries, k=2, verbose=0)
    assert got["hits@2"] == sum(
        lookup.label == label for row, label in zip(rows, labels, strict=True) for lookup in row
    )


def _peak_bytes(verb):
    """The peak of traced memory allocated while `verb()` runs, above what was held before."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        verb()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def many_queries():
    x, y = _data(64, seed=2)
    index = Indexer(embedding_size=DIM, distance="l2")
    index.batch_add(x, y, verbose=0)
    queries, labels = _data(80_000, seed=3)
    return index, queries, labels


def test_retrieval_and_classification_memory_does_not_grow_with_the_queries(many_queries):
    index, queries, labels = many_queries
    thresholds = np.linspace(0.1, 4.0, 64)

    def peaks(n):
        x, y = queries[:n], labels[:n]
        retrieval = _peak_bytes(
            lambda: index.evaluate_retrieval(
                x, y, [RecallAtK(k=1), PrecisionAtK(k=5, average="macro")], verbose=0
            )
        )
        classification = _peak_bytes(
            lambda: index.evaluate_classification(
                x, y, thresholds, matcher="match_majority_vote", k=3, verbose=0
            )
        )
        return retrieval, classification

    small, large = peaks(20_000), peaks(80_000)
    for few, many in zip(small, large, strict=True):
        assert many < 1.3 * few + 256 * 1024, (small, large)


def test_calibration_keeps_a_few_scalars_per_query(many_queries):
    index, queries, labels = many_queries

    def peak(n):
        return _peak_bytes(
            lambda: index.calibrate(queries[:n], labels[:n], {"0.9": 0.9}, verbose=0)
        )

    small, large = peak(20_000), peak(80_000)
    # A flag, a distance and a distinct distance per query, and the table of
    # four metrics at each distinct distance returned: never queries by thresholds.
    assert (large - small) / 60_000 < 256, (small, large)
