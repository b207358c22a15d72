"""Tests of `benchmark/unseen_digits.py`: its nearest-neighbour recall, report, and a smoke run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tensorflow_similarity.data import load_data
from tests.benchmark_results import load_benchmark, run_quick

unseen_digits = load_benchmark("unseen_digits")


def loop_recall(index, index_labels, queries, query_labels, metric, leave_one_out=False):
    """recall@1 per query, with plain loops in float64."""
    hits = []
    for i, query in enumerate(np.asarray(queries, np.float64)):
        best, best_label = None, None
        for j, key in enumerate(np.asarray(index, np.float64)):
            if leave_one_out and i == j:
                continue
            if metric == "cosine":
                score = -sum(q * k for q, k in zip(query, key, strict=True)) / (
                    np.sqrt(sum(q * q for q in query)) * np.sqrt(sum(k * k for k in key))
                )
            else:
                score = sum((q - k) ** 2 for q, k in zip(query, key, strict=True))
            if best is None or score < best:
                best, best_label = score, index_labels[j]
        hits.append(best_label == query_labels[i])
    return np.array(hits)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_nearest_recall_matches_a_loop(metric):
    rng = np.random.default_rng(0)
    index, queries = rng.normal(size=(40, 5)), rng.normal(size=(25, 5))
    index_labels, query_labels = rng.integers(0, 4, 40), rng.integers(0, 4, 25)
    np.testing.assert_array_equal(
        unseen_digits.nearest_recall(index, index_labels, queries, query_labels, metric),
        loop_recall(index, index_labels, queries, query_labels, metric),
    )
    # Leave-one-out: without it every vector finds itself, so all hits would be True.
    loo = unseen_digits.nearest_recall(index, index_labels, index, index_labels, metric, True)
    np.testing.assert_array_equal(
        loo, loop_recall(index, index_labels, index, index_labels, metric, leave_one_out=True)
    )
    assert not loo.all()


def test_group_recall_splits_seen_and_unseen_classes():
    hits = np.array([True, False, True, True, False, False])
    labels = np.array([0, 5, 6, 9, 7, 1])
    # Digits 6-9 (positions 2, 3, 4) are unseen: 2 of 3 hits; the seen ones 1 of 3.
    assert unseen_digits.group_recall(hits, labels) == {"unseen": 2 / 3, "seen": 1 / 3}


def payload(unseen):
    """A report whose unseen figures are `unseen[seed][name]` (same for both protocols)."""
    figures = {
        str(seed): {
            name: {protocol: {"unseen": value, "seen": 0.9} for protocol in ("job", "loo")}
            for name, value in by_name.items()
        }
        for seed, by_name in unseen.items()
    }
    return {
        "seeds": [int(seed) for seed in unseen],
        "quick": False,
        "job": "default options",
        "machine": "x86_64, 2 CPU cores",
        "versions": "TF 2.21.0, Keras 3.15.1",
        "date": "2026-12-02T00:00:00+00:00",
        "wall_minutes": 5.0,
        "command": "python benchmark/unseen_digits.py",
        "figures": figures,
    }


def test_report_gives_each_seed_its_row_and_the_differences():
    report = payload(
        {
            0: {"pixels": 0.972, "nca": 0.986, "untrained": 0.958, "trained": 0.944},
            1: {"pixels": 1.0, "nca": 0.979, "untrained": 0.965, "trained": 0.972},
        }
    )
    text = unseen_digits.render_markdown(report)
    assert "| job | unseen | 0 | 0.972 | 0.986 | 0.958 | 0.944 |" in text
    assert "| loo | unseen | 1 | 1.000 | 0.979 | 0.965 | 0.972 |" in text
    assert "| job | seen | 1 | 0.900 | 0.900 | 0.900 | 0.900 |" in text
    assert (
        "- network, trained - network, untrained, `job`: -0.014, +0.007 (above on 1 of 2 seeds)"
        in text
    )
    assert "- NCA (seen classes) - pixels, `loo`: +0.014, -0.021 (above on 1 of 2 seeds)" in text
    assert "- pixels - network, untrained, `job`: +0.014, +0.035 (above on 2 of 2 seeds)" in text


# Runs the job once (seed 0, 1 epoch) in a fresh process: out of the fast loop, still in CI.
@pytest.mark.slow
def test_quick_run_scores_the_jobs_network_as_the_job_does_and_leaves_results_alone(tmp_path):
    folder = run_quick("unseen_digits", tmp_path)  # also asserts benchmark/results untouched
    report = json.loads((folder / "unseen_digits.json").read_text())
    assert report["seeds"] == [0] and report["quick"]
    figures = report["figures"]["0"]
    # The network's figures under the job's protocol are the job's own table's.
    assert figures["untrained"]["job"]["unseen"] == pytest.approx(figures["summary"]["before"])
    assert figures["trained"]["job"]["unseen"] == pytest.approx(figures["summary"]["after"])
    # The pixels' figures, recomputed with loops on the job's split of seed 0.
    data = load_data("digits", 8, seed=0)
    train = data.x_train[..., 0].reshape(len(data.x_train), -1)
    test = data.x_test[..., 0].reshape(len(data.x_test), -1)
    hits = loop_recall(train, data.y_train, test, data.y_test, "cosine")
    unseen = data.y_test >= 6
    assert figures["pixels"]["job"]["unseen"] == pytest.approx(hits[unseen].mean())
    assert figures["pixels"]["job"]["seen"] == pytest.approx(hits[~unseen].mean())
    for name in ("nca", "untrained", "trained"):
        for protocol in ("job", "loo"):
            assert 0.5 < figures[name][protocol]["unseen"] <= 1.0
    assert (folder / "unseen_digits.md").read_text() == unseen_digits.render_markdown(report) + "\n"
