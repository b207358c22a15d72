"""Smoke test of `python -m benchmark.serving_size --quick`: rows and tables, off results/."""

from __future__ import annotations

import json

import pytest

from benchmark import serving_size
from tests.benchmark.quick_runs import quick_output_folder, results_snapshot, run_benchmark

# Runs the benchmark end to end: out of the fast loop, still in CI.
pytestmark = pytest.mark.slow


def test_quick_run_measures_the_saved_model_and_tflite_into_a_temporary_folder():
    before = results_snapshot()
    result = run_benchmark("benchmark.serving_size", "--quick", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    out = quick_output_folder(result.stdout)
    assert results_snapshot() == before
    payload = json.loads((out / "serving_size.json").read_text())
    assert payload["quick"] and [row["size_mib"] for row in payload["rows"]] == [1, 4]
    for row in payload["rows"]:
        assert row["saved"] and row["within_limit"]
        # The embeddings in variables/, not in saved_model.pb; all of them in the TFLite file.
        assert row["variables_bytes"] >= row["index_bytes"] - row["items"] * 9
        assert row["saved_model_pb_bytes"] < 100_000
        assert row["tflite_bytes"] >= row["index_bytes"] - row["items"] * 9
    assert (out / "serving_size.md").read_text() == serving_size.render_markdown(payload)
