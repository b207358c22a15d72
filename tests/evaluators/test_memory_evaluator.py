"""MemoryEvaluator on a case computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.classification_metrics import F1Score, Precision, Recall
from tensorflow_similarity.evaluators import MemoryEvaluator
from tensorflow_similarity.retrieval_metrics import RecallAtK
from tensorflow_similarity.types import Lookup

# Four queries of classes 0..3; their nearest neighbours: right, right, wrong, right.
QUERY_LABELS = [0, 1, 2, 3]
LOOKUPS = [
    [Lookup(1, 0.1, 0), Lookup(2, 0.5, 1)],
    [Lookup(1, 0.2, 1), Lookup(2, 0.6, 0)],
    [Lookup(1, 0.3, 9), Lookup(2, 0.7, 2)],
    [Lookup(1, 0.4, 3), Lookup(2, 0.8, 3)],
]
# Calibration tries every distinct lookup distance, as 0.17: look up k=1 for it.
NEAREST = [row[:1] for row in LOOKUPS]
# At thresholds 0.1, 0.2, 0.3, 0.4: (tp, fp, fn) = (1,0,2), (2,0,1), (2,1,1), (3,1,0).
PRECISION = [1.0, 1.0, 2 / 3, 3 / 4]
RECALL = [1 / 3, 2 / 3, 2 / 3, 1.0]
F1 = [0.5, 0.8, 2 / 3, 6 / 7]


def test_calibration_thresholds_and_optimal_cutpoint():
    results = MemoryEvaluator().calibrate(
        QUERY_LABELS,
        NEAREST,
        {"0.6": 0.6},
        F1Score(),
        "match_nearest",
        extra_metrics=[Precision(), Recall()],
        verbose=0,
    )
    np.testing.assert_allclose(results.thresholds["distance"], [0.1, 0.2, 0.3, 0.4], rtol=1e-6)
    np.testing.assert_allclose(results.thresholds["precision"], PRECISION, atol=1e-6)
    np.testing.assert_allclose(results.thresholds["recall"], RECALL, atol=1e-6)
    np.testing.assert_allclose(results.thresholds["value"], F1, atol=1e-6)
    optimal = results.cutpoints["optimal"]
    assert optimal["distance"] == pytest.approx(0.4)
    assert optimal["value"] == pytest.approx(6 / 7, abs=1e-6)
    assert optimal["precision"] == pytest.approx(0.75)


@pytest.mark.parametrize(
    "metric, target, distance",
    [
        # Recall increases with the distance: the first threshold reaching the target.
        (Recall(), 0.6, 0.2),
        # Precision does not: the last threshold reaching it.
        (Precision(), 0.9, 0.2),
        (Precision(), 0.7, 0.4),
    ],
)
def test_target_cutpoints(metric, target, distance):
    results = MemoryEvaluator().calibrate(
        QUERY_LABELS, NEAREST, {"target": target}, metric, "match_nearest", verbose=0
    )
    assert results.cutpoints["target"]["distance"] == pytest.approx(distance)
    assert results.cutpoints["target"]["value"] >= target


def test_unreachable_target_has_no_cutpoint_and_errors():
    evaluator = MemoryEvaluator()
    results = evaluator.calibrate(QUERY_LABELS, NEAREST, {"0.99": 0.99}, F1Score(), "match_nearest")
    assert set(results.cutpoints) == {"optimal"}
    with pytest.raises(ValueError, match="none were given"):
        evaluator.calibrate([], [], {}, F1Score(), "match_nearest")
    with pytest.raises(ValueError, match="3 labels for 4 queries"):
        evaluator.calibrate(QUERY_LABELS[:3], LOOKUPS, {}, F1Score(), "match_nearest")
    with pytest.raises(ValueError, match="needs 3 neighbours"):
        evaluator.evaluate_retrieval(QUERY_LABELS, LOOKUPS, [RecallAtK(k=3)])
    with pytest.raises(ValueError, match="has no label"):
        evaluator.evaluate_retrieval([0], [[Lookup(1, 0.1)]], [RecallAtK(k=1)])


def test_retrieval_recall_by_hand():
    results = MemoryEvaluator().evaluate_retrieval(
        QUERY_LABELS, LOOKUPS, [RecallAtK(k=1), RecallAtK(k=2)]
    )
    assert results == {"recall@1": pytest.approx(0.75), "recall@2": pytest.approx(1.0)}
