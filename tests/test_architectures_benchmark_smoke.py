"""Smoke test of `benchmark/architectures.py --quick`: builds time, counts and tables are written.

Run in a subprocess, as a user would, because the script configures its own
logical devices. Timings are never asserted; layer and parameter counts are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_results import load_benchmark, quick_output_folder, results_snapshot

# Each runs a benchmark script end to end (tens of seconds): out of the fast loop.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmark" / "architectures.py"


def test_quick_run_writes_build_rows_and_tables(tmp_path):
    # Without --out, a quick run writes to a new folder in TMPDIR, never to benchmark/results.
    before = results_snapshot()
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--no-step"],
        cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert results_snapshot() == before
    out = quick_output_folder(result.stdout)
    assert out.parent == tmp_path
    payload = json.loads((out / "architectures.json").read_text())
    assert payload["quick"] and payload["size"] == 64 and payload["build_repeats"] == 1
    rows = {row["builder"]: row for row in payload["builds"]}
    assert set(rows) == {"ResNet18Sim", "EfficientNetSim(B0)"}
    assert (rows["ResNet18Sim"]["batch_norm_layers"], rows["ResNet18Sim"]["synced_layers"]) == (
        20,
        20,
    )
    assert rows["ResNet18Sim"]["rebuild_copy_s"] is None  # native: nothing to rebuild
    efficientnet = rows["EfficientNetSim(B0)"]
    assert efficientnet["batch_norm_layers"] == efficientnet["synced_layers"] == 49
    for row in rows.values():
        assert row["build_plain_s"] > 0 and row["build_sync_s"] > 0
        assert row["sync_over_plain"] == row["build_sync_s"] / row["build_plain_s"]
    assert efficientnet["rebuild_copy_s"] > 0 and efficientnet["rebuild_shared_s"] > 0
    assert "step" not in payload

    markdown = (out / "architectures.md").read_text()
    assert f"| ResNet18Sim | {rows['ResNet18Sim']['params']:,} | 20 | 20 |" in markdown
    assert "alternating which goes first" in markdown
    over = sum(row["sync_over_plain"] > 1.5 for row in rows.values())
    assert f"met by {2 - over} of 2 rows" in markdown

    # The report renders the same tables, rebuild columns included.
    section = load_benchmark("report").script_section("architectures.json", payload)
    shared = efficientnet["rebuild_shared_s"]
    percent = 100 * shared / efficientnet["backbone_s"]
    assert f"| {shared:.2f} ({percent:.0f}%) |" in section
    assert f"met by {2 - over} of 2 rows" in section
