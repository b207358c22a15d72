"""Retrieval metrics against hand-computed cases, Python loops and scikit-learn."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
from sklearn.metrics import average_precision_score, ndcg_score

from tensorflow_similarity.retrieval_metrics import (
    BNDCG,
    MapAtK,
    MapAtR,
    PrecisionAtK,
    RecallAtK,
    RetrievalMetric,
    RPrecision,
    compute_match_mask,
)

# Three queries; lookups nearest first. Query 0 (label 1): hit at ranks 2, 3;
# query 1 (label 2): hit at rank 1; query 2 (label 1): no hit.
QUERY_LABELS = np.array([1, 2, 1])
LOOKUP_LABELS = np.array([[0, 1, 1, 0], [2, 0, 0, 0], [0, 3, 3, 3]])
DISTANCES = np.array([[0.1, 0.2, 0.3, 0.4], [0.1, 0.5, 0.6, 0.7], [0.2, 0.3, 0.4, 0.5]])


def _compute(metric):
    return metric.compute(
        query_labels=QUERY_LABELS, lookup_labels=LOOKUP_LABELS, lookup_distances=DISTANCES
    )


@pytest.mark.parametrize(
    "metric, expected",
    [
        (RecallAtK(k=1), 1 / 3),
        (RecallAtK(k=2), 2 / 3),
        (RecallAtK(k=2, average="macro"), (0.5 + 1.0) / 2),  # class 1: 1 of 2; class 2: 1
        (RecallAtK(k=3, distance_threshold=0.15), 1 / 3),
        (RecallAtK(k=2, drop_closest_lookup=True), 1 / 3),  # ranks 2-3
        (PrecisionAtK(k=3), (2 / 3 + 1 / 3 + 0) / 3),
        (PrecisionAtK(k=4, average="macro"), ((0.5 + 0) / 2 + 0.25) / 2),
        (PrecisionAtK(k=3, r={1: 4, 2: 1}), (2 / 4 + 1 / 1 + 0) / 3),
        (PrecisionAtK(k=4, r={1: 2, 2: 1}, clip_at_r=True), (1 / 2 + 1 + 0) / 3),
        (MapAtK(k=3), ((1 / 2 + 2 / 3) / 3 + 1 / 3 + 0) / 3),
        (MapAtK(k=4, r={1: 2, 2: 1}), ((1 / 2 + 2 / 3) / 2 + 1 + 0) / 3),
        (MapAtR(r={1: 2, 2: 1}), ((1 / 2) / 2 + 1 + 0) / 3),
        (RPrecision(r={1: 2, 2: 1}), (1 / 2 + 1 + 0) / 3),
        (RPrecision(r={1: 3, 2: 1}, drop_closest_lookup=True), (2 / 2 + 0 + 0) / 3),
        (
            BNDCG(k=3),
            ((1 / math.log2(3) + 1 / math.log2(4)) / (1 + 1 / math.log2(3)) + 1 + 0) / 3,
        ),
        (BNDCG(k=3, distance_threshold=0.25), ((1 / math.log2(3)) / 1 + 1 + 0) / 3),
    ],
    ids=lambda value: getattr(value, "name", None),
)
def test_hand_computed(metric, expected):
    assert _compute(metric) == pytest.approx(expected, abs=1e-12)


def _random_case(seed, n=30, lookups=12, classes=4):
    rng = np.random.default_rng(seed)
    query_labels = rng.integers(0, classes, n)
    lookup_labels = rng.integers(0, classes, (n, lookups))
    distances = np.sort(rng.random((n, lookups)), axis=1)
    return query_labels, lookup_labels, distances


def _loop_scores(name, query_labels, lookup_labels, k, r=None):
    scores = []
    for label, row in zip(query_labels, lookup_labels, strict=True):
        rel = [int(value == label) for value in row]
        big_r = k if r is None else r.get(int(label), 0)
        if name == "recall":
            scores.append(float(any(rel[:k])))
        elif name == "precision":
            scores.append(sum(rel[:k]) / big_r if big_r else 0.0)
        elif name == "map":
            total = sum(rel[j] * sum(rel[: j + 1]) / (j + 1) for j in range(k))
            scores.append(total / big_r if big_r else 0.0)
        elif name == "r_precision":
            scores.append(sum(rel[:big_r]) / big_r if big_r else 0.0)
        elif name == "map@r":
            total = sum(rel[j] * sum(rel[: j + 1]) / (j + 1) for j in range(big_r))
            scores.append(total / big_r if big_r else 0.0)
    return np.array(scores)


R = {0: 3, 1: 5, 2: 12, 3: 1}


@pytest.mark.parametrize("average", ["micro", "macro"])
@pytest.mark.parametrize(
    "make, name, uses_r",
    [
        (lambda average: RecallAtK(k=5, average=average), "recall", False),
        (lambda average: PrecisionAtK(k=5, average=average), "precision", False),
        (lambda average: MapAtK(k=7, r=R, average=average), "map", True),
        (lambda average: RPrecision(r=R, average=average), "r_precision", True),
        (lambda average: MapAtR(r=R, average=average), "map@r", True),
    ],
)
def test_against_loops(make, name, uses_r, average):
    query_labels, lookup_labels, _ = _random_case(1)
    metric = make(average)
    scores = _loop_scores(name, query_labels, lookup_labels, metric.k, R if uses_r else None)
    if average == "micro":
        expected = scores.mean()
    else:
        expected = np.mean([scores[query_labels == c].mean() for c in np.unique(query_labels)])
    got = metric.compute(query_labels=query_labels, lookup_labels=lookup_labels)
    assert got == pytest.approx(expected, abs=1e-12)


def test_map_equals_sklearn_average_precision_when_every_example_is_looked_up():
    rng = np.random.default_rng(2)
    index_labels = rng.integers(0, 3, 25)
    query_labels = rng.integers(0, 3, 8)
    distances = rng.random((8, 25))
    order = np.argsort(distances, axis=1)
    lookup_labels = index_labels[order]
    lookup_distances = np.take_along_axis(distances, order, axis=1)
    r = {int(c): int((index_labels == c).sum()) for c in np.unique(index_labels)}
    got = MapAtK(k=25, r=r).compute(
        query_labels=query_labels, lookup_labels=lookup_labels, lookup_distances=lookup_distances
    )
    expected = np.mean(
        [
            average_precision_score(index_labels == label, -row)
            for label, row in zip(query_labels, distances, strict=True)
        ]
    )
    assert got == pytest.approx(expected, abs=1e-12)


def test_bndcg_equals_sklearn_ndcg_over_the_retrieved_set():
    query_labels, lookup_labels, distances = _random_case(3)
    mask = compute_match_mask(query_labels, lookup_labels)
    k = 6
    got = BNDCG(k=k).compute(query_labels=query_labels, match_mask=mask, lookup_distances=distances)
    per_query = []
    for row, dist in zip(mask, distances, strict=True):
        if row[:k].any():  # sklearn scores a query with no relevant item 0 too
            per_query.append(ndcg_score([row[:k].astype(float)], [-dist[:k]], k=k))
        else:
            per_query.append(0.0)
    assert got == pytest.approx(np.mean(per_query), abs=1e-12)


def test_names_and_config_round_trip():
    assert RecallAtK(k=3).name == "recall@3"
    assert BNDCG(k=2, distance_threshold=0.5).name == "ndcg@2 : distance_threshold@0.5"
    assert RPrecision(r={1: 2}).name == "r_precision"
    for metric in (
        RecallAtK(k=3, average="macro"),
        PrecisionAtK(k=2, r={4: 7}),
        MapAtK(k=3, drop_closest_lookup=True),
        MapAtR(r={1: 3, 2: 4}),
        RPrecision(r={1: 3}),
        BNDCG(k=2, distance_threshold=0.25),
    ):
        config = metric.get_config()
        rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
        assert type(rebuilt) is type(metric) and rebuilt.get_config() == config
        assert rebuilt.name == metric.name
        assert _compute(rebuilt) == _compute(metric)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"query_labels": [1, 2]}, "lookup_labels or match_mask"),
        ({"query_labels": [1], "lookup_labels": [[1, 1]]}, "needs 3 neighbours"),
        ({"query_labels": [1, 2], "lookup_labels": [[1, 1, 1]]}, "one row of lookups"),
    ],
)
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RecallAtK(k=3).compute(**kwargs)


def test_threshold_needs_distances_and_arguments_are_checked():
    with pytest.raises(ValueError, match="lookup_distances"):
        RecallAtK(k=1, distance_threshold=0.5).compute(query_labels=[1], lookup_labels=[[1]])
    with pytest.raises(ValueError, match="average"):
        RecallAtK(average="weighted")
    with pytest.raises(ValueError, match="k"):
        RecallAtK(k=0)
    with pytest.raises(ValueError, match="needs r"):
        PrecisionAtK(clip_at_r=True)
    assert issubclass(RecallAtK, RetrievalMetric)
