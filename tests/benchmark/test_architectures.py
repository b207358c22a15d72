"""Smoke test of `python -m benchmark.architectures --quick`: build times, counts and tables.

Run in a subprocess, as a user would, because the benchmark configures its own
logical devices. Timings are never asserted; layer and parameter counts are.
"""

from __future__ import annotations

import json

import pytest

from benchmark import report
from tests.benchmark.quick_runs import quick_output_folder, results_snapshot, run_benchmark

# Each runs a benchmark end to end (tens of seconds): out of the fast loop.
pytestmark = pytest.mark.slow


def test_quick_run_writes_build_rows_and_tables(tmp_path):
    # Without --out, a quick run writes to a new folder in TMPDIR, never to benchmark/results.
    before = results_snapshot()
    result = run_benchmark(
        "benchmark.architectures", "--quick", "--no-step", env={"TMPDIR": str(tmp_path)}
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
    section = report.script_section(payload, out, "architectures.json")
    shared = efficientnet["rebuild_shared_s"]
    percent = 100 * shared / efficientnet["backbone_s"]
    assert f"| {shared:.2f} ({percent:.0f}%) |" in section
    assert f"met by {2 - over} of 2 rows" in section
