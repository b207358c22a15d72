"""Tests of `benchmark/glyphs/runs.py`: its report, and a smoke run against the jobs' summaries."""

from __future__ import annotations

import json

import pytest

from benchmark.glyphs import runs as glyphs_runs
from tests.benchmark.quick_runs import run_quick


def test_report_rows_and_differences():
    payload = {
        "quick": False,
        "seeds": [0],
        "machine": "x86_64, 2 CPU cores",
        "date": "2026-12-02",
        "runs": {
            "supervised": [
                {
                    "seed": 0,
                    "seconds": 150.4,
                    "unseen_pixels": 0.6,
                    "unseen_before": 0.55,
                    "unseen_after": 0.68,
                    "seen_pixels": 0.75,
                    "seen_before": 0.7,
                    "seen_after": 0.8,
                }
            ],
            "self-supervised": [
                {
                    "seed": 0,
                    "seconds": 99.6,
                    "knn_pixels": 0.7,
                    "knn_before": 0.6,
                    "knn_after": 0.65,
                }
            ],
        },
    }
    text = glyphs_runs.render_markdown(payload)
    assert "| 0 | 0.600 | 0.550 | 0.680 | +0.080 | 0.750 / 0.700 / 0.800 | 150 |" in text
    assert "| 0 | 0.700 | 0.600 | 0.650 | +0.050 | 100 |" in text


@pytest.mark.slow
def test_quick_run_reports_each_jobs_own_summary(tmp_path):
    # run_quick also asserts that benchmark/results is left untouched.
    folder = run_quick("benchmark.glyphs.runs", tmp_path)
    payload = json.loads((folder / "glyphs_runs.json").read_text())
    assert payload["quick"] and payload["seeds"] == [0]
    (supervised,) = payload["runs"]["supervised"]
    (ssl,) = payload["runs"]["self-supervised"]
    for key in ("unseen", "seen"):
        for when in ("pixels", "before", "after"):
            assert 0.0 <= supervised[f"{key}_{when}"] <= 1.0
    for when in ("pixels", "before", "after"):
        assert 0.0 <= ssl[f"knn_{when}"] <= 1.0
    assert (folder / "glyphs_runs.md").read_text() == glyphs_runs.render_markdown(payload) + "\n"
