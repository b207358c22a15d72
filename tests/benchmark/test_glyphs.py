"""Tests of `benchmark.glyphs`: the runs' report, a smoke run, and the report's sections."""

from __future__ import annotations

import json

import pytest

from benchmark import report
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


def ssl_length_run(epochs, seed, knn_after, width=1.0):
    return {
        "width": width,
        "epochs": epochs,
        "seed": seed,
        "knn_pixels": 0.6,
        "knn_before": 0.5,
        "knn_after": knn_after,
        "knn_by_epoch": [0.55] * (epochs - 1) + [knn_after],
        "seconds_by_epoch": [60.0] * epochs,
        "training_seconds": 60.0 * epochs,
        "wall_seconds": 60.0 * epochs + 30.0,
    }


def test_the_report_has_a_length_of_run_section_only_when_its_results_exist(tmp_path):
    section = (
        "## The self-supervised job on glyphs by width and length of run (`glyphs_ssl_length.json`)"
    )
    (tmp_path / "glyphs_runs.json").write_text(
        json.dumps({"quick": False, "seeds": [], "machine": "x86_64", "runs": {}})
    )
    assert section not in report.main(["--results", str(tmp_path)]).read_text()

    # Evaluated after every 10th epoch (--eval-every 10): the other epochs have no figure.
    scheduled = ssl_length_run(30, 0, 0.6, width=0.25)
    scheduled["knn_by_epoch"] = [0.55 if e % 10 == 0 else None for e in range(1, 31)]
    payload = {
        "quick": False,
        "machine": "x86_64, 2 CPU cores",
        "date": "2026-12-03",
        "runs": [
            ssl_length_run(5, 0, 0.7),
            ssl_length_run(5, 1, 0.8),
            scheduled,
        ],
    }
    (tmp_path / "glyphs_ssl_length.json").write_text(json.dumps(payload))
    text = report.main(["--results", str(tmp_path)]).read_text()
    assert section in text
    assert "Command: `python -m benchmark.glyphs.ssl_length`." in text
    # Right after the runs' section, its tables nested two levels down.
    assert text.index("(`glyphs_runs.json`)") < text.index(section)
    assert "### Self-supervised job on glyphs: kNN accuracy by width and length of run" in text
    # One row per width and length, the full width's two seeds together.
    assert "| 1 | 5 | 0, 1 | 0.750 ± 0.071 |" in text
    assert "| 0.25 | 30 | 0 | 0.600 | 0.100 | 1 of 1 |" in text
    curve = "| 0.25 | 30 | 0 | 0.500 | 10: 0.550 (+0.050, 10 min); 30: 0.550 (+0.050, 30 min) |"
    assert curve in text
