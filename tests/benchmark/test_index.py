"""Smoke test of `python -m benchmark.index --quick`: rows, recalls and tables, off results/.

Run in a subprocess, as a user would. Timings are never asserted; exact
backends' recall is, and so is where the files go.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmark import report
from benchmark.common import RESULTS_DIR
from tests.benchmark.quick_runs import run_benchmark

# Runs the benchmark end to end: out of the fast loop, still in CI.
pytestmark = pytest.mark.slow


def test_quick_run_writes_rows_and_tables_into_a_temporary_folder():
    results = RESULTS_DIR / "index.json"
    before = results.stat().st_mtime_ns if results.exists() else None
    result = run_benchmark("benchmark.index", "--quick", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = Path(re.search(r"wrote (\S+)/index\.json", result.stdout).group(1))
    assert RESULTS_DIR not in (out, *out.parents)
    assert (results.stat().st_mtime_ns if results.exists() else None) == before

    payload = json.loads((out / "index.json").read_text())
    assert payload["quick"] and payload["queries"] == 50
    (row,) = payload["rows"]
    assert row["size"] == 1_000 and row["k"] == 10
    assert row["linear_recall_vs_tf"] == 1.0 and row["faiss_flat_recall"] == 1.0
    assert row["linear_over_tf"] == row["linear_query_s"] / row["tf_query_s"]
    for key in ("hnsw_sweep", "hnsw_clustered_sweep"):
        assert [entry["ef_search"] for entry in row[key]] == [64, 128, 256, 512]
        assert all(0.0 <= entry["recall"] <= 1.0 and entry["qps"] > 0 for entry in row[key])

    markdown = (out / "index.md").read_text()
    assert len(payload["verdicts"]) == 5
    for line in payload["verdicts"]:
        assert line in markdown
    assert f"| 1,000 | LinearSearch | {row['linear_build_s']:.3f} |" in markdown

    # The report renders the same tables.
    section = report.script_section(payload, out, "index.json")
    assert "## Search backends (`index.json`)" in section
    assert "`python -m benchmark.index --quick`" in section
    for line in payload["verdicts"]:
        assert line in section
