"""Smoke test of `python -m benchmark.cached_batches --quick`: the curve's rows, off results/."""

from __future__ import annotations

import json

import pytest

from benchmark import cached_batches
from tests.benchmark.quick_runs import run_quick

# Runs the benchmark end to end (three child processes): out of the fast loop, still in CI.
pytestmark = pytest.mark.slow


def test_quick_run_measures_one_pass_and_each_chunk_size(tmp_path):
    out = run_quick("benchmark.cached_batches", tmp_path)
    payload = json.loads((out / "cached_batches.json").read_text())
    assert payload["quick"] and [row["chunk_size"] for row in payload["rows"]] == [None, 16, 4]
    losses = [row["loss"] for row in payload["rows"]]
    # One step in chunks or in one pass lands on the same weights (float32 rounding).
    assert max(losses) - min(losses) < 1e-4 * abs(losses[0])
    assert all(row["extra_peak_mib"] > 0 for row in payload["rows"])
    assert (out / "cached_batches.md").read_text() == cached_batches.render_markdown(payload) + "\n"
