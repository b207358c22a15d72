"""A matcher's counts at each threshold: by sorting, in chunks, equal to plain loops."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tensorflow_similarity.matchers import MatchMajorityVote, MatchNearest


def _lookups(n, k, seed=0):
    rng = np.random.default_rng(seed)
    query_labels = rng.integers(0, 4, size=n)
    lookup_labels = rng.integers(0, 4, size=(n, k))
    distances = np.round(rng.uniform(0, 2, size=(n, k)), 2).astype(np.float32)
    distances[rng.random((n, k)) < 0.05] = np.inf
    distances[0, 0] = np.nan
    return query_labels, lookup_labels, np.sort(distances, axis=1)


@pytest.mark.parametrize("matcher_class", [MatchNearest, MatchMajorityVote])
def test_counts_in_chunks_are_those_of_plain_loops(matcher_class):
    query_labels, lookup_labels, distances = _lookups(60, 3)
    thresholds = [0.0, 0.25, 0.5, 1.0, 1.99, np.inf]
    whole = matcher_class()
    whole.compile(thresholds)
    whole.compute_count(query_labels, lookup_labels, distances)
    chunked = matcher_class()
    chunked.compile(thresholds)
    chunked.reset_count()
    for start in range(0, 60, 7):
        rows = slice(start, start + 7)
        chunked.update_count(
            *chunked.derive_outcomes(query_labels[rows], lookup_labels[rows], distances[rows])
        )
    labels, derived = whole.match(lookup_labels, distances)
    for position, threshold in enumerate(thresholds):
        want = {"tp": 0, "fp": 0, "fn": 0, "tn": 0}
        for query, label, distance in zip(query_labels, labels[:, 0], derived[:, 0], strict=True):
            within = bool(distance <= threshold)  # NaN is never within
            key = {(True, True): "tp", (False, True): "fp", (True, False): "fn"}.get(
                (bool(label == query), within), "tn"
            )
            want[key] += 1
        for matcher in (whole, chunked):
            got = {key: float(getattr(matcher, key)[position]) for key in want}
            assert got == want
    assert whole.count == chunked.count == 60


def test_counting_never_holds_queries_by_thresholds():
    query_labels, lookup_labels, distances = _lookups(4000, 1)
    matcher = MatchNearest()
    matcher.compile(np.unique(distances[np.isfinite(distances)]).tolist() + list(range(4000)))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        matcher.compute_count(query_labels, lookup_labels, distances)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    # 4,000 queries by ~4,200 thresholds would be 16 MB per boolean mask.
    assert peak < 1_000_000, peak


def test_update_count_before_reset_count_is_refused():
    with pytest.raises(AttributeError, match="reset_count"):
        MatchNearest().update_count([True], [0.5])
