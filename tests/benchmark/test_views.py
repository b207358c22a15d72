"""Smoke test of `benchmark.views`: its rows, tables and report section, run in-process.

Timings are never asserted: only that each way, transform and row is measured
and reported.
"""

from __future__ import annotations

import json

from benchmark import report, views


def test_quick_run_writes_rows_and_tables(tmp_path):
    views.main(["--quick", "--out", str(tmp_path), "--augmenters", "SimCLR", "glyphs"])
    payload = json.loads((tmp_path / "views.json").read_text())
    assert payload["quick"] and payload["sizes"] == [16] and payload["batch_size"] == 8
    simclr, glyphs = payload["pipelines"]
    assert simclr["augmenter"] == "SimCLR" and simclr["images_per_s"] > 0
    assert simclr["batched_images_per_s"] > 0 and simclr["in_step_images_per_s"] > 0
    assert glyphs["augmenter"] == "glyphs" and glyphs["batched_images_per_s"] is None
    (costs,) = payload["transforms"]
    assert set(costs["seconds"]) == set(views.transforms(16))
    assert set(costs["each_image_seconds"]) == {
        "crop (uint8 in, float out)",
        *views.EACH_IMAGE_TRANSFORMS,
    }
    assert costs["each_image_seconds"]["crop (uint8 in, float out)"] > 0

    section = report.script_section(payload, tmp_path, "views.json")
    assert "Two-view augmenters" in section and "| SimCLR | 16 |" in section
    assert "| gaussian blur |" in section and "| random_gaussian_blur |" in section
    assert (tmp_path / "views.md").read_text().startswith("# Two-view augmenters")
