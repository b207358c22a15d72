"""`--optimizer lars`: LARS at `--learning-rate` scaled linearly from a batch of 256."""

from __future__ import annotations

import argparse
import json

import pytest

from tensorflow_similarity.cli import main
from tensorflow_similarity.cli.fitting import (
    learning_rate_text,
    resolved_learning_rate,
    scheduled_optimizer,
)
from tensorflow_similarity.cli.options import resolve_defaults
from tensorflow_similarity.cli.parser import build_parser
from tensorflow_similarity.optimizers import LARS
from tensorflow_similarity.schedules import WarmupCosineDecay
from tests.cli.test_cli import QUICK, tfsim


def resolved(argv: list[str]) -> argparse.Namespace:
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    return resolve_defaults(build_parser().parse_args(argv), explicit)


def test_lars_default_learning_rate_is_simclrs_base_at_256():
    args = resolved(["pretrain", "--optimizer", "lars", "--batch-size", "512"])
    assert args.learning_rate == 0.3
    assert resolved_learning_rate(args) == pytest.approx(0.6)
    assert (
        learning_rate_text(args)
        == "lars at learning rate 0.6 (--learning-rate 0.3 x batch 512 / 256)"
    )


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_other_optimizers_keep_their_learning_rate(optimizer):
    args = resolved(["pretrain", "--optimizer", optimizer, "--learning-rate", "0.02"])
    assert resolved_learning_rate(args) == 0.02
    assert learning_rate_text(args) == f"{optimizer} at learning rate 0.02"


def test_lars_warms_up_then_decays_from_the_scaled_rate():
    args = resolved(
        ["pretrain", "--optimizer", "lars", "--learning-rate", "0.5", "--batch-size", "64"]
    )
    args = argparse.Namespace(**{**vars(args), "epochs": 4})
    optimizer = scheduled_optimizer(args, steps_per_epoch=5)
    assert isinstance(optimizer, LARS)
    assert (optimizer.momentum, optimizer.lars_weight_decay, optimizer.eta) == (0.9, 1e-6, 0.001)
    assert optimizer.exclude == "bias_and_norm"
    schedule = optimizer._learning_rate
    assert isinstance(schedule, WarmupCosineDecay)
    assert (schedule.total_steps, schedule.warmup_steps) == (20, 2)
    assert float(schedule(2)) == pytest.approx(0.5 * 64 / 256)


@pytest.mark.parametrize("rate", ["0", "-0.1", "nan"])
def test_lars_refuses_a_learning_rate_that_is_not_positive_before_any_work(tmp_path, capsys, rate):
    output = tmp_path / "run"
    argv = ["pretrain", "--optimizer", "lars", "--learning-rate", rate, "--output", str(output)]
    assert main(argv) == 2
    assert "--learning-rate must be positive" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.parametrize(
    ("kinds", "expected"),
    [("bias", ["bias"]), ("norm", ["gamma", "beta"]), ("norm,bias", "bias_and_norm"), ("none", [])],
)
def test_lars_exclude_chooses_what_lars_leaves_out(kinds, expected):
    args = resolved(["pretrain", "--optimizer", "lars", "--lars-exclude", kinds])
    optimizer = scheduled_optimizer(args, steps_per_epoch=5)
    assert optimizer.exclude == (expected if isinstance(expected, str) else tuple(expected))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--optimizer", "lars", "--lars-exclude", "bias,gamma"], "unknown kind 'gamma'"),
        (["--optimizer", "lars", "--lars-exclude", ""], "unknown kind ''"),
        (["--optimizer", "sgd", "--lars-exclude", "bias"], "--optimizer is sgd"),
    ],
)
def test_lars_exclude_refuses_an_unknown_kind_before_any_work(tmp_path, capsys, argv, message):
    output = tmp_path / "run"
    assert main(["pretrain", *argv, "--output", str(output)]) == 2
    assert message in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.slow
def test_lars_run_reports_its_resolved_learning_rate(tmp_path):
    output = tmp_path / "run"
    result = tfsim(
        "pretrain",
        *QUICK,
        "--epochs",
        "1",
        "--optimizer",
        "lars",
        "--output",
        str(output),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert "lars at learning rate 0.0375 (--learning-rate 0.3 x batch 32 / 256)" in first
    run = json.loads((output / "run.json").read_text())
    assert run["options"]["optimizer"] == "lars"
    assert run["options"]["learning_rate"] == 0.3
    assert run["resolved_learning_rate"] == pytest.approx(0.0375)
