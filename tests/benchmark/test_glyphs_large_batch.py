"""Tests of `benchmark.glyphs.large_batch`: the report and the arguments, no training."""

from __future__ import annotations

import json

import pytest

from benchmark.glyphs import large_batch


def fake_run(optimizer, learning_rate):
    return {
        "optimizer": optimizer,
        "learning_rate": learning_rate,
        "train_images": 2100,
        "epochs": 80,
        "steps": 160,
        "training_seconds": 612.4,
        "wall_seconds": 700.0,
        **{key: 0.5 for key in large_batch.FIGURES},
        "linear_after": None,
        "loss": 6.91234,
        "proj_std": 0.04417,
    }


def payload(quick=False):
    return {
        "quick": quick,
        "data": "glyphs",
        "replicas": 8,
        "batch_size": 1024,
        "epochs": 80,
        "machine": "x86_64, 2 CPU cores",
        "date": "2026-12-04",
        "note": "A note.",
        "runs": [fake_run("lars", 1.2), fake_run("adam", 0.001)],
    }


def test_render_markdown_has_one_row_per_optimizer():
    text = large_batch.render_markdown(payload())
    assert text.startswith("# Large global batch: LARS against Adam")
    assert "--batch-size 1024 --optimizer O --epochs 80 --eval-every 80 --seed 0" in text
    assert "on glyphs (2100 training images), x86_64" in text
    assert "start to table: 23 min. A note." in text and "(--quick)" not in text
    header = "| optimizer | learning rate | epochs | steps | training s | kNN pixels |"
    assert header in text
    row = "| 80 | 160 | 612 | 0.500 | 0.500 | 0.500 | 0.500 | 0.500 | n/a | 6.912 | 0.0442 |"
    assert f"| lars | 1.2 {row}" in text
    assert f"| adam | 0.001 {row}" in text


def test_arguments():
    assert large_batch.parse_args([]).epochs is None
    args = large_batch.parse_args(["--quick", "--epochs", "2", "--note", "n"])
    assert args.quick and args.epochs == 2 and args.note == "n"
    with pytest.raises(SystemExit):
        large_batch.parse_args(["--epochs", "0"])


@pytest.mark.parametrize(
    "argv, batch_size, epochs",
    [([], 1024, large_batch.EPOCHS), (["--quick"], 64, 1), (["--epochs", "3"], 1024, 3)],
)
def test_both_optimizers_run_the_same_epochs(monkeypatch, tmp_path, argv, batch_size, epochs):
    calls = []

    def pretrain(optimizer, options, size, folder):
        calls.append((optimizer, options, size))
        return fake_run(optimizer, 1.0)

    monkeypatch.setattr(large_batch, "pretrain", pretrain)
    large_batch.main([*argv, "--out", str(tmp_path)])
    assert [call[0] for call in calls] == ["lars", "adam"]
    for _, options, size in calls:
        assert size == batch_size
        # Last, so that it wins over the --epochs of a quick run's QUICK_OPTIONS.
        assert options[-4:] == ["--epochs", str(epochs), "--eval-every", str(epochs)]
        assert ("--limit" in options) == ("--quick" in argv)
    written = json.loads((tmp_path / "large_batch.json").read_text())
    assert written["batch_size"] == batch_size and written["epochs"] == epochs
    assert (tmp_path / "large_batch.md").read_text() == large_batch.render_markdown(written) + "\n"
