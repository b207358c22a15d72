"""Smoke test of `benchmark/metric_losses.py --quick`: both minings, results off results/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_results import load_benchmark, quick_output_folder, results_snapshot

# Runs the benchmark script end to end: out of the fast loop, still in CI.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]


def test_quick_run_measures_both_minings_and_leaves_results_alone(tmp_path):
    before = results_snapshot()
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmark" / "metric_losses.py"), "--quick"],
        cwd=REPO / "benchmark",
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert results_snapshot() == before
    folder = quick_output_folder(result.stdout)
    payload = json.loads((folder / "metric_losses.json").read_text())
    assert [(r["loss"], r["replicas"]) for r in payload["cost"]] == [("multisimilarity", 2)]
    row = payload["cost"][0]
    assert row["ms_global"] > 0 and row["ms_per_replica"] > 0
    # Each replica gathers the global batch's embeddings (64 float32) and two int64s per image.
    assert row["bytes_gathered"] == row["global_batch"] * (64 * 4 + 16)
    minings = {r["mining"] for r in payload["quality"]}
    assert minings == {"global", "per replica"}
    for r in payload["quality"]:
        for metric in ("recall@1", "map@r", "recall@1_before", "map@r_before"):
            assert 0.0 <= r[metric] <= 1.0
    markdown = (folder / "metric_losses.md").read_text()
    assert "## Cost" in markdown and "## Quality" in markdown
    assert load_benchmark("metric_losses").render_markdown(payload) == markdown
