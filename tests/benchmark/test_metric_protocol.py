"""Tests of `benchmark.metric.protocol`: its splits, scores, verdicts, report and a smoke run.

The retrieval scores are checked against plain loops over queries and
neighbours in float64; the clustering scores are `evaluators.clustering_metrics`'
own, tested where it is defined.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmark import report
from benchmark.metric import protocol
from tensorflow_similarity import losses
from tensorflow_similarity.datasets import ImageData
from tests.benchmark.quick_runs import run_quick


def reference_retrieval(embeddings, labels):
    """MAP@R, R-precision and precision@1 of each item querying all others, by loops."""
    n = len(labels)
    unit = [e / np.sqrt(sum(v * v for v in e)) for e in np.asarray(embeddings, "float64")]
    map_r, r_precision, precision_1 = [], [], []
    for q in range(n):
        others = [i for i in range(n) if i != q]
        similarity = {i: sum(a * b for a, b in zip(unit[q], unit[i], strict=True)) for i in others}
        ranked = sorted(others, key=lambda i: (-similarity[i], i))
        r = sum(1 for i in others if labels[i] == labels[q])
        hits = [labels[i] == labels[q] for i in ranked[:r]]
        found, precisions = 0, 0.0
        for position, hit in enumerate(hits, start=1):
            if hit:
                found += 1
                precisions += found / position
        map_r.append(precisions / r)
        r_precision.append(sum(hits) / r)
        precision_1.append(float(labels[ranked[0]] == labels[q]))
    return {
        "map@r": np.mean(map_r),
        "r_precision": np.mean(r_precision),
        "precision@1": np.mean(precision_1),
    }


def test_retrieval_scores_equal_a_loop_reference():
    rng = np.random.default_rng(3)
    labels = np.array([0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2])
    embeddings = rng.normal(size=(len(labels), 4)) + 0.8 * np.eye(4)[labels]
    got = protocol.scores(embeddings, labels)
    expected = reference_retrieval(embeddings, labels)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name
    assert set(got) == set(protocol.METRICS)
    assert 0.0 < got["map@r"] < 1.0  # Neither trivial case: the test can tell them apart.


def test_every_metric_loss_of_the_package_is_compared_or_left_out_by_name(monkeypatch):
    names = protocol.metric_loss_names()
    assert {"ProxyAnchorLoss", "ProxyNCALoss", "SupConLoss", "TripletLoss"} <= set(names)
    for name in losses.__all__:
        cls = getattr(losses, name)
        if isinstance(cls, type) and issubclass(cls, losses.MetricLoss):
            assert (
                name in names
                or name in protocol.LEFT_OUT
                or cls.__name__
                in (
                    "MetricLoss",
                    "ProxyLoss",
                )
            ), name
    for name in names:  # Each setting builds its loss.
        for setting in protocol.SETTINGS[name]:
            protocol.make_loss(name, setting, num_classes=5)
    monkeypatch.delitem(protocol.SETTINGS, "CircleLoss")
    with pytest.raises(ValueError, match="no settings for CircleLoss: add a row"):
        protocol.metric_loss_names()


def test_splits_are_class_disjoint():
    images = np.arange(12 * 4, dtype="float32").reshape(12, 2, 2, 1)
    data = ImageData(
        x_train=images[:8],
        y_train=np.array([0, 1, 2, 3, 4, 0, 2, 4], dtype="int32"),
        x_test=images[8:],
        y_test=np.array([1, 2, 3, 4], dtype="int32"),
        class_names=["a", "b", "c", "d", "e"],
        source="fake",
        seen_classes=3,
    )
    splits = protocol.split_classes(data, validation_classes=1)
    np.testing.assert_array_equal(splits["train"][1], [0, 1, 0])  # Training images only.
    np.testing.assert_array_equal(splits["validation"][1], [2, 2, 2])
    np.testing.assert_array_equal(splits["test"][1], [3, 4, 4, 3, 4])
    np.testing.assert_array_equal(splits["test"][0], images[[3, 4, 7, 10, 11]])
    with pytest.raises(ValueError, match="leave 1 to train on"):
        protocol.split_classes(data, validation_classes=2)


def fake_payload():
    runs = {"SupConLoss": [0.50, 0.52, 0.54], "TripletLoss": [0.49, 0.53, 0.52]}
    metrics = dict.fromkeys(protocol.METRICS, 0.1)
    return {
        "command": "python -m benchmark.metric.protocol",
        "meta": {
            "date": "2026-12-06",
            "machine": "test",
            "quick": False,
            "seconds": 1.0,
            "seeds": [0, 1, 2],
            "steps": 200,
            "left_out": protocol.LEFT_OUT,
            "split_sizes": {
                "train_classes": 50,
                "validation_classes": 12,
                "test_classes": 81,
                "train": 900,
                "validation": 264,
                "test": 1262,
            },
        },
        "losses": [
            {
                "loss": name,
                "selection": [{"setting": {"margin": None}, "validation_map@r": 0.4}],
                "chosen": 0,
                "runs": [{"seed": s} | metrics | {"map@r": v} for s, v in enumerate(values)],
            }
            for name, values in runs.items()
        ],
        "untrained": [{"seed": s} | metrics | {"map@r": 0.1 + s / 100} for s in range(3)],
        "raw_pixels": metrics | {"map@r": 0.3},
    }


def test_findings_state_which_differences_are_outside_the_seed_spread():
    text = protocol.findings(fake_payload())
    # SupCon - Triplet: differences +0.01, -0.01, +0.02; mean 0.0067 < spread 0.02.
    assert "- SupConLoss - TripletLoss: +0.007 (2/3 seeds > 0; seed spread 0.021)" in text
    assert "within the seed spread" in text.splitlines()[0]
    assert "- SupConLoss - untrained network: +0.410" in text
    assert "outside the seed spread" in text.splitlines()[1]
    assert "every seed of SupConLoss, TripletLoss above it" in text


def test_report_adds_the_protocol_section(tmp_path):
    (tmp_path / "metric_protocol.json").write_text(json.dumps(fake_payload()))
    text = report.main(["--results", str(tmp_path)]).read_text()
    assert "Metric losses under one protocol: MAP@R, NMI and AMI on unseen classes" in text
    assert "| SupConLoss | margin=none | 0.520 ± 0.020 |" in text
    assert "| raw pixels | - | 0.300 |" in text


@pytest.mark.slow
def test_quick_run_writes_every_metric_and_leaves_results_alone(tmp_path):
    # run_quick also asserts that benchmark/results is left untouched.
    folder = run_quick("benchmark.metric.protocol", tmp_path)
    payload = json.loads((folder / "metric_protocol.json").read_text())
    assert [entry["loss"] for entry in payload["losses"]] == ["ProxyAnchorLoss", "SupConLoss"]
    for entry in payload["losses"]:
        assert len(entry["selection"]) == 2 and len(entry["runs"]) == 2
        for run in entry["runs"]:
            assert set(protocol.METRICS) <= set(run)
    assert set(protocol.METRICS) <= set(payload["raw_pixels"])
    assert (
        "## Which MAP@R differences are outside the seed spread"
        in (folder / "metric_protocol.md").read_text()
    )
