"""Matchers: derived labels and distances against loops, tp/fp/tn/fn counts by hand."""

from __future__ import annotations

import collections
import math

import keras
import numpy as np
import pytest

from tensorflow_similarity.matchers import (
    MatchMajorityVote,
    MatchNearest,
    make_classification_matcher,
)


def test_nearest_takes_the_first_neighbour():
    labels, distances = MatchNearest().match(
        [[3, 1, 1], [2, 0, 0]], [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]
    )
    assert labels.tolist() == [[3], [2]] and distances.tolist() == [[0.1], [0.4]]


def test_majority_vote_against_a_loop():
    rng = np.random.default_rng(0)
    lookup_labels = rng.integers(0, 3, (100, 5))
    distances = np.sort(rng.random((100, 5)), axis=1)
    labels, mean_distances = MatchMajorityVote().match(lookup_labels, distances)
    for row, label, row_distances, mean in zip(
        lookup_labels, labels[:, 0], distances, mean_distances[:, 0], strict=True
    ):
        counts = collections.Counter(row.tolist())
        best = max(counts.values())
        first_tied = next(value for value in row.tolist() if counts[value] == best)
        assert label == first_tied
        assert mean == pytest.approx(np.mean(row_distances))


def test_majority_vote_ignores_missing_neighbours_against_a_loop():
    """Neighbours at distance inf (a short lookup's padding) have no vote, no part in the mean."""
    rng = np.random.default_rng(1)
    lookup_labels = rng.integers(0, 3, (200, 6))
    distances = np.sort(rng.random((200, 6)), axis=1).astype(np.float32)
    found_counts = rng.integers(0, 7, 200)
    for row, count in enumerate(found_counts):
        lookup_labels[row, count:] = 0x7FFFFFFF
        distances[row, count:] = np.inf
    labels, mean_distances = MatchMajorityVote().match(lookup_labels, distances)
    for row, count in enumerate(found_counts):
        found = lookup_labels[row, :count].tolist()
        if not found:
            assert labels[row, 0] == 0x7FFFFFFF and mean_distances[row, 0] == np.inf
            continue
        counts = collections.Counter(found)
        best = max(counts.values())
        assert labels[row, 0] == next(value for value in found if counts[value] == best)
        assert mean_distances[row, 0] == pytest.approx(
            sum(map(float, distances[row, :count])) / count
        )


def test_counts_by_hand():
    # Query labels, nearest labels and distances; thresholds 0.25 and inf.
    query_labels = [1, 1, 2, 3]
    lookup_labels = [[1, 0], [0, 1], [2, 2], [3, 3]]
    distances = [[0.1, 0.9], [0.2, 0.3], [0.5, 0.6], [0.3, 0.4]]
    matcher = MatchNearest()
    matcher.compile([math.inf, 0.25])
    np.testing.assert_array_equal(matcher.distance_thresholds, [0.25, math.inf])
    matcher.compute_count(query_labels, lookup_labels, distances)
    # At 0.25: q0 right within (tp), q1 wrong within (fp), q2 right beyond (fn), q3 right beyond.
    assert matcher.tp.numpy().tolist() == [1, 3]
    assert matcher.fp.numpy().tolist() == [1, 1]
    assert matcher.fn.numpy().tolist() == [2, 0]
    assert matcher.tn.numpy().tolist() == [0, 0]
    assert matcher.count == 4


def test_without_compile_the_threshold_is_infinite():
    matcher = MatchMajorityVote()
    matcher.compute_count([1, 2], [[1, 1, 2], [1, 1, 2]], [[0.1, 0.1, 0.1], [5.0, 5.0, 5.0]])
    assert (matcher.tp.numpy().tolist(), matcher.fp.numpy().tolist()) == ([1], [1])


def test_errors():
    matcher = MatchNearest()
    with pytest.raises(AttributeError, match="compute_count"):
        _ = matcher.tp
    with pytest.raises(ValueError, match=r"\[n, K\]"):
        matcher.compute_count([1], [[1, 2]], [[0.1]])
    with pytest.raises(ValueError, match="2 query labels"):
        matcher.compute_count([1, 2], [[1]], [[0.1]])
    with pytest.raises(ValueError, match="NaN"):
        matcher.compile([0.1, float("nan")])
    with pytest.raises(ValueError, match="Unknown matcher"):
        make_classification_matcher("match_furthest")


def test_names_and_config():
    for name, cls in (("match_nearest", MatchNearest), ("match_majority_vote", MatchMajorityVote)):
        matcher = make_classification_matcher(name)
        assert type(matcher) is cls
        rebuilt = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(matcher)
        )
        assert type(rebuilt) is cls and rebuilt.get_config() == matcher.get_config()
