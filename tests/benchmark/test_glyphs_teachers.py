"""Tests of `benchmark.glyphs.teachers`: the time budget, the report, the arguments."""

from __future__ import annotations

import json

import pytest

from benchmark import report
from benchmark.glyphs import teachers

# Steady seconds per epoch of each method in the fake runs.
SPEED = {"simclr": 2.0, "byol": 3.0, "mocov3": 2.5, "dino": 4.0}


def fake_run(method, seed, epochs=30):
    return {
        "method": method,
        "seed": seed,
        "epochs": epochs,
        "training_seconds": 10.0 + SPEED[method] * (epochs - 1),
        "seconds_per_epoch": SPEED[method],
        "wall_seconds": 100.0,
        **{key: 0.5 + 0.01 * seed for key in teachers.FIGURES},
        "proj_std": 0.04,
        "pred_std": 0.03 if method in ("byol", "mocov3") else None,
        "teacher_entropy": 6.0 if method == "dino" else None,
    }


def test_epochs_for_budget_rounds_and_never_gives_zero():
    assert teachers.epochs_for_budget(60.0, 3.0) == 20
    assert teachers.epochs_for_budget(60.0, 7.0) == 9
    assert teachers.epochs_for_budget(1.0, 7.0) == 1


def test_each_teacher_gets_simclrs_time_from_its_own_calibration(monkeypatch, tmp_path):
    calls = []

    def pretrain(method, seed, options, folder):
        calls.append((method, seed, options))
        epochs = int(options[options.index("--epochs") + 1]) if "--epochs" in options else 30
        return fake_run(method, seed, epochs)

    monkeypatch.setattr(teachers, "pretrain", pretrain)
    teachers.main(["--seeds", "0", "1", "--out", str(tmp_path)])
    # SimCLR runs the job's default; each teacher is calibrated on the first seed first.
    assert calls[:3] == [("simclr", 0, []), ("simclr", 1, []), ("byol", 0, ["--epochs", "2"])]
    payload = json.loads((tmp_path / "glyphs_teachers.json").read_text())
    # 30 epochs x 2 s = 60 s: byol 60 / 3 = 20 epochs, mocov3 24, dino 15.
    assert payload["budget"]["seconds"] == 60.0
    assert payload["budget"]["epochs"] == {"byol": 20, "mocov3": 24, "dino": 15}
    assert [run["epochs"] for run in payload["runs"]["dino"]] == [15, 15]
    text = (tmp_path / "glyphs_teachers.md").read_text()
    assert text == teachers.render_markdown(payload) + "\n"
    assert "make a budget of 60 s" in text
    assert "byol 3.00 s -> 20 epochs" in text
    assert "| dino | 1 | 15 | 66 | 0.510 |" in text
    assert "| **dino** | mean | 15 | 66 | 0.505 |" in text
    assert text.rstrip().endswith("| 0.0400 | - | 6.0000 |")


def test_quick_report_has_no_budget():
    payload = {
        "quick": True,
        "seeds": [0],
        "machine": "x86_64, 2 CPU cores",
        "date": "2026-12-04",
        "budget": None,
        "note": None,
        "runs": {method: [fake_run(method, 0, 1)] for method in teachers.METHODS},
    }
    text = teachers.render_markdown(payload)
    assert "Quick run: every method one epoch" in text
    assert "| byol | 0 | 1 | 10 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 |" in text
    assert "mean" not in text.split("\n\n")[-1]


def test_a_full_run_must_start_with_simclr():
    with pytest.raises(SystemExit):
        teachers.main(["--methods", "byol", "dino"])


def test_the_report_has_a_teachers_section_after_the_length_of_run_one(tmp_path):
    payload = {
        "quick": False,
        "seeds": [0],
        "machine": "x86_64, 2 CPU cores",
        "date": "2026-12-04",
        "budget": None,
        "note": "A note.",
        "runs": {"simclr": [fake_run("simclr", 0)]},
    }
    (tmp_path / "glyphs_teachers.json").write_text(json.dumps(payload))
    text = report.main(["--results", str(tmp_path)]).read_text()
    assert "## Momentum teachers beside SimCLR on glyphs (`glyphs_teachers.json`)" in text
    assert "Command: `python -m benchmark.glyphs.teachers`." in text
    assert "### Momentum teachers beside SimCLR on glyphs" in text
    assert "the budget comes after its last seed. " in text and "A note." in text
    assert "| simclr | 0 | 30 | 68 | 0.500 |" in text
