"""Tests of `benchmark.self_supervised.leakage`: the leak's figures, the report and its verdicts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmark import report as benchmark_report
from benchmark.self_supervised import leakage


def loop_figures(queries, keys, per_replica, temperature):
    """Plain loops in float64: the leak and the loss split of one global batch."""
    n = len(queries)
    unit = lambda v: [x / math.sqrt(sum(y * y for y in v)) for x in v]  # noqa: E731
    q, k = [unit(row) for row in queries], [unit(row) for row in keys]
    sim = [
        [sum(a * b for a, b in zip(q[i], k[j], strict=True)) for j in range(n)] for i in range(n)
    ]
    own, other, split = [], [], []
    for i in range(n):
        mine = [j for j in range(n) if j // per_replica == i // per_replica and j != i]
        theirs = [j for j in range(n) if j // per_replica != i // per_replica]
        own += [sim[i][j] for j in mine]
        other += [sim[i][j] for j in theirs]
        positive = math.exp(sim[i][i] / temperature)

        def term(negatives, i=i, positive=positive):
            mass = sum(math.exp(sim[i][j] / temperature) for j in negatives)
            return -math.log(positive / (positive + mass))

        other_terms = []
        for r in range(n // per_replica):
            if r != i // per_replica:
                other_terms.append(term(range(r * per_replica, (r + 1) * per_replica - 1)))
        split.append(term(mine) - sum(other_terms) / len(other_terms))
    return {
        "sim_own": sum(own) / len(own),
        "sim_other": sum(other) / len(other),
        "leak": sum(own) / len(own) - sum(other) / len(other),
        "loss_split": sum(split) / n,
    }


@pytest.mark.parametrize("per_replica", [2, 4])
def test_leak_figures_match_plain_loops(per_replica):
    rng = np.random.default_rng(per_replica)
    queries, keys = rng.normal(size=(2, 4 * per_replica, 5))
    got = leakage.leak_figures(queries, keys, per_replica, temperature=0.2)
    expected = loop_figures(queries, keys, per_replica, 0.2)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-12), name


def test_a_replica_signature_shows_as_a_leak_and_no_signature_averages_zero():
    rng = np.random.default_rng(0)
    per_replica, replicas = 4, 8
    content = rng.normal(size=(replicas * per_replica, 16))
    signature = np.repeat(3.0 * rng.normal(size=(replicas, 16)), per_replica, axis=0)
    leaked = leakage.leak_figures(content + signature, content + signature, per_replica, 0.2)
    assert leaked["leak"] > 0.3 and leaked["loss_split"] > 0.5
    # Without a signature both figures are zero in expectation, even where the negatives
    # compete with the positive (few dimensions, noisy keys), where a comparison of unequal
    # sums would be biased.
    for per_replica in (2, 4):
        splits = []
        for seed in range(40):
            content = np.random.default_rng(seed).normal(size=(replicas * per_replica, 4))
            noise = np.random.default_rng(seed + 100).normal(size=content.shape)
            clean = leakage.leak_figures(content, content + 2.0 * noise, per_replica, 0.1)
            splits.append((clean["leak"], clean["loss_split"]))
        mean_leak, mean_split = np.mean(splits, axis=0)
        assert abs(mean_leak) < 0.05 and abs(mean_split) < 0.2, (per_replica, mean_split)


def fake_payload():
    def run(mode, seed, leak):
        epochs = [
            {"epoch": e, "leak": leak * e, "loss_split": leak, "knn_accuracy": 0.1 + 0.01 * e}
            for e in range(3)
        ]
        return {"method": "simclr", "mode": mode, "per_replica": 2, "seed": seed, "epochs": epochs}

    runs = [run("per_replica", s, 0.10 + 0.01 * s) for s in range(3)]
    runs += [run("sync", s, 0.001 * s) for s in range(3)]
    return {
        "meta": {"date": "2026-12-06", "machine": "test"},
        "command": "python -m benchmark.self_supervised.leakage",
        "config": {
            "seeds": 3,
            "epochs": 2,
            "steps": 6,
            "batch_sizes": [2],
            "probe_batches": 16,
            "image_size": 16,
            "width": 8,
            "learning_rate": 0.002,
            "replicas": 8,
        },
        "methods": {"simclr": ["per_replica", "sync"]},
        "pixels_knn": 0.25,
        "runs": runs,
    }


def test_report_gives_mean_and_range_and_judges_the_overlap():
    payload = fake_payload()
    text = leakage.render_markdown(payload)
    # Epoch 2: per-replica 0.20, 0.22, 0.24; sync 0, 0.002, 0.004.
    assert (
        "| simclr | 2 | per_replica | +0.0000 [+0.0000, +0.0000] | +0.2200 [+0.2000, +0.2400]"
        in text
    )
    assert "simclr, b=2: leak +0.2200 per-replica against +0.0020 sync: outside the seed" in text
    payload["runs"][3]["epochs"][2]["leak"] = 0.21  # One sync seed inside per-replica's range.
    assert "sync: within the seed spread" in leakage.render_markdown(payload)


def test_benchmark_report_adds_the_section(tmp_path):
    (tmp_path / "leakage.json").write_text(json.dumps(fake_payload()))
    text = benchmark_report.build_report(tmp_path, tmp_path)
    assert "## The batch-norm leak, measured: per-replica, synchronised and shuffle" in text
    assert "Command: `python -m benchmark.self_supervised.leakage`." in text
