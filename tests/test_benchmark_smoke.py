"""Smoke test of `benchmark/sync_bn.py`: a `--quick` run writes every table row.

The script runs in a subprocess, as a user would run it, because it must
configure its own logical devices before TensorFlow initialises. Timings are
never asserted (they depend on the machine and its load); collective counts and
variance errors are deterministic and are.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmark" / "sync_bn.py"
VARIANTS = ("plain", "keras", "ours")
LABELS = (
    "plain `BatchNormalization`",
    "Keras `BatchNormalization(synchronized=True)`",
    "ours `SyncBatchNormalization`",
)
RATIOS = (0.0, 1e2, 1e3, 1e4)


def _run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sync_bn")
    result = _run_script("--quick", "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    report = json.loads((out / "sync_bn.json").read_text())
    markdown = (out / "sync_bn.md").read_text()
    return report, markdown, result.stdout


def _table_rows(markdown: str, section: str) -> list[list[str]]:
    """The body rows of the markdown tables under `## <section>`."""
    body = markdown.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def test_header_names_machine_versions_date_and_command(quick_run):
    report, markdown, _ = quick_run
    meta = report["meta"]
    for key in ("hardware", "cpu_count", "tensorflow", "keras", "date_utc", "command"):
        assert meta[key], key
    assert meta["quick"] is True
    assert f"TensorFlow {meta['tensorflow']}, Keras {meta['keras']}" in markdown
    assert f"{meta['cpu_count']} CPUs" in markdown
    assert "--quick" in meta["command"] and f"`{meta['command']}`" in markdown
    assert meta["date_utc"] in markdown


def test_stdout_prints_the_written_tables(quick_run):
    _, markdown, stdout = quick_run
    assert markdown.strip() in stdout


def test_collectives_table_has_every_variant_and_counts_agree(quick_run):
    report, markdown, _ = quick_run
    rows = {row["variant"]: row for row in report["collectives"]}
    assert set(rows) == set(VARIANTS)
    for row in rows.values():
        # The graph count and the trace-time all_reduce counter are independent.
        assert row["counts_agree"], row
    assert rows["plain"]["graph_ops_step"] == 0
    assert rows["ours"]["total_per_layer"] <= 2
    assert rows["keras"]["total_per_layer"] > 0

    table = _table_rows(markdown, "Collectives per batch-norm layer")
    assert [row[0] for row in table[1:]] == list(LABELS)
    agree = table[0].index("graph = counter")
    assert all(row[agree] == "yes" for row in table[1:])


def test_step_time_table_has_a_row_per_setting_and_replica_count(quick_run):
    report, markdown, _ = quick_run
    meta = report["meta"]
    expected = {(s["name"], k) for s in meta["settings"] for k in meta["replica_counts"]}
    assert len(expected) == 4
    got = {(row["setting"], row["replicas"]) for row in report["step_time"]}
    assert got == expected
    for row in report["step_time"]:
        for variant in VARIANTS:
            assert len(row["times_ms"][variant]) == meta["reps"]
            assert math.isfinite(row["median_ms"][variant])
        assert math.isfinite(row["ours_over_plain"]) and math.isfinite(row["keras_over_plain"])

    table = _table_rows(markdown, "Training step time")
    body = [row for row in table if row[0] != "replicas"]
    assert len(body) == len(expected)
    assert all(len(row) == 9 for row in body)
    for setting in meta["settings"]:
        assert f"### {setting['name']}" in markdown


def test_robustness_table_has_every_ratio_and_ours_is_accurate(quick_run):
    report, markdown, _ = quick_run
    rows = report["robustness"]
    assert [row["mean_over_std"] for row in rows] == list(RATIOS)
    for row in rows:
        errors = row["relative_error"]
        assert set(errors) == {"keras", "ours", "single_device"}
        # Against a float64 NumPy variance of the same data.
        assert errors["ours"] < 1e-3, row
    table = _table_rows(markdown, "Variance relative error")
    assert [row[0] for row in table[1:]] == ["0", "100", "1000", "10000"]


def test_gpu_request_without_gpu_fails_clearly(tmp_path):
    result = _run_script(
        "--quick", "--device", "gpu", "--out", str(tmp_path), env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert result.returncode != 0
    assert "--device gpu" in result.stderr and "--device cpu" in result.stderr
    assert not list(tmp_path.iterdir())
