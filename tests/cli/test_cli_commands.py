"""The training commands: `tfsim pretrain`, `tfsim train-metric`, and `tfsim train --algorithm`.

Each job's command has its own options only, so argparse refuses the other job's; `train`
takes both and runs the job its `--algorithm` names, with the same options as the job's own
command would give it.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from tensorflow_similarity.cli import main
from tensorflow_similarity.cli.metric_options import SUPERVISED_ALGORITHMS
from tensorflow_similarity.cli.options import RUN_OPTIONS, resolve_defaults, resumed_options
from tensorflow_similarity.cli.parser import build_parser
from tensorflow_similarity.models.contrastive_model import ALGORITHMS

# Options of one job only, with a value each takes.
METRIC_OPTIONS = [
    ["--train-classes", "4"],
    ["--classes-per-batch", "2"],
    ["--embedding-size", "8"],
    ["--augment"],
    ["--no-augment"],
]
PRETRAIN_OPTIONS = [["--projector-dim", "64"]]


def resolved(argv: list[str]) -> dict:
    """The options `main` runs with for `argv`, before `--resume` (no folder is read)."""
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    return vars(resolve_defaults(build_parser().parse_args(argv), explicit))


def parse_error(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The message argparse ends with for `argv` (exit status 2), or fails if it parses."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


def option_help(command: str, option: str) -> str:
    """The help of `option` in `tfsim COMMAND --help`, on one line."""
    commands = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    for action in commands.choices[command]._actions:
        if option in action.option_strings:
            return action.help
    raise AssertionError(f"{command} has no {option}")


def test_help_lists_the_commands_and_train_names_its_new_spellings():
    commands = next(
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    text = " ".join(build_parser().format_help().split())
    for name in ["pretrain", "train-metric", "train", "lookup"]:
        assert name in commands.choices
        assert re.search(rf"(^| ){re.escape(name)} ", text), name
    # `train` says which commands it stands for.
    train_help = " ".join(commands.choices["train"].format_help().split())
    assert "tfsim pretrain" in train_help and "tfsim train-metric" in train_help


@pytest.mark.parametrize("option", METRIC_OPTIONS, ids=lambda o: o[0])
def test_pretrain_refuses_the_metric_jobs_options(option, capsys):
    error = parse_error(["pretrain", *option], capsys)
    assert f"tfsim: error: unrecognized arguments: {option[0]}" in error


@pytest.mark.parametrize("option", PRETRAIN_OPTIONS, ids=lambda o: o[0])
def test_train_metric_refuses_the_pretrain_jobs_options(option, capsys):
    error = parse_error(["train-metric", *option], capsys)
    assert f"tfsim: error: unrecognized arguments: {option[0]}" in error


@pytest.mark.parametrize(
    "command, algorithm",
    [("pretrain", name) for name in SUPERVISED_ALGORITHMS]
    + [("train-metric", name) for name in ALGORITHMS],
)
def test_each_command_refuses_the_other_jobs_algorithms(command, algorithm, capsys):
    error = parse_error([command, "--algorithm", algorithm], capsys)
    assert f"argument --algorithm: invalid choice: '{algorithm}'" in error


def test_train_takes_both_jobs_options_and_refuses_the_other_jobs_after_parsing(tmp_path, capsys):
    for option in [*METRIC_OPTIONS, *PRETRAIN_OPTIONS]:
        build_parser().parse_args(["train", *option])  # parsed, not refused by argparse
    status = main(["train", "--projector-dim", "64", "--algorithm", "triplet", "--output", "x"])
    assert status == 2
    assert "--projector-dim is an option of self-supervised runs" in capsys.readouterr().err


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--data", "digits"],
        *[["--algorithm", name] for name in ALGORITHMS],
        ["--algorithm", "barlow", "--data", "digits", "--optimizer", "adam", "--epochs", "4"],
        ["--projector-dim", "64", "--no-sync-bn", "--seed", "3", "--limit", "100"],
    ],
)
def test_pretrain_runs_with_the_options_train_gives_the_same_job(options):
    new = resolved(["pretrain", *options])
    old = resolved(["train", *options])
    assert new.pop("command") == "pretrain" and old.pop("command") == "train"
    assert new == old
    assert new["algorithm"] in ALGORITHMS
    assert {key: new[key] for key in RUN_OPTIONS} == {key: old[key] for key in RUN_OPTIONS}


@pytest.mark.parametrize(
    "options",
    [
        *[["--algorithm", name] for name in SUPERVISED_ALGORITHMS],
        ["--algorithm", "circle", "--data", "digits"],
        ["--algorithm", "triplet", "--train-classes", "10", "--no-augment"],
        ["--algorithm", "arcface", "--embedding-size", "32", "--batch-size", "36"],
    ],
)
def test_train_metric_runs_with_the_options_train_gives_the_same_job(options):
    new = resolved(["train-metric", *options])
    old = resolved(["train", *options])
    assert new.pop("command") == "train-metric" and old.pop("command") == "train"
    assert new == old
    assert new["algorithm"] in SUPERVISED_ALGORITHMS


def test_train_metrics_default_loss_is_the_one_its_help_names():
    default = resolved(["train-metric"])
    assert default["algorithm"] in SUPERVISED_ALGORITHMS
    assert option_help("train-metric", "--algorithm").endswith(f"Default: {default['algorithm']}")
    without = dict(default, command="train")
    assert without == resolved(["train", "--algorithm", default["algorithm"]])


@pytest.mark.parametrize(
    "command, option, key",
    [
        (command, option, key)
        for command in ["pretrain", "train-metric"]
        for option, key in [
            ("--epochs", "epochs"),
            ("--batch-size", "batch_size"),
            ("--optimizer", "optimizer"),
        ]
    ],
)
def test_each_commands_help_states_its_own_jobs_defaults(command, option, key):
    text = option_help(command, option)
    stated = text.split("Default: ")[-1]
    # The defaults as the command resolves them: on glyphs (DATA_DEFAULTS) and on other data.
    on_glyphs = resolved([command, "--data", "glyphs"])[key]
    elsewhere = resolved([command, "--data", "digits"])[key]
    assert stated == (
        f"{on_glyphs} on glyphs, else {elsewhere}"
        if on_glyphs != elsewhere or "on glyphs" in stated
        else str(elsewhere)
    )
    assert "self-supervised:" not in text and "supervised:" not in text


def test_train_help_states_both_jobs_defaults():
    text = option_help("train", "--epochs")
    ssl = (resolved(["train", "--data", "glyphs"]), resolved(["train", "--data", "digits"]))
    sup = (
        resolved(["train", "--algorithm", "triplet", "--data", "glyphs"]),
        resolved(["train", "--algorithm", "triplet", "--data", "digits"]),
    )
    assert f"self-supervised: {ssl[0]['epochs']} on glyphs, else {ssl[1]['epochs']}" in text
    assert f"; supervised: {sup[0]['epochs']} on glyphs, else {sup[1]['epochs']}" in text


def write_resumable_run(output: Path, argv: list[str]) -> dict:
    """A run.json as `argv` writes it, of a run stopped before its first epoch."""
    options = resolved(argv)
    output.mkdir(parents=True)
    (output / "run.json").write_text(
        json.dumps({"options": {key: options[key] for key in RUN_OPTIONS}})
    )
    return options


@pytest.mark.parametrize(
    "written_by, other, right",
    [
        (["pretrain", "--data", "digits"], "train-metric", "pretrain"),
        (["train", "--algorithm", "simclr"], "train-metric", "pretrain"),
        (["train-metric", "--algorithm", "triplet"], "pretrain", "train-metric"),
        (["train", "--algorithm", "pn", "--data", "digits"], "pretrain", "train-metric"),
    ],
)
def test_resume_with_the_other_jobs_command_is_refused_and_names_the_right_one(
    tmp_path, capsys, written_by, other, right
):
    output = tmp_path / "run"
    options = write_resumable_run(output, written_by)
    status = main([other, "--output", str(output), "--resume"])
    error = capsys.readouterr().err
    assert status == 2, error
    assert f"--algorithm {options['algorithm']}" in error
    assert f"tfsim {right} --output {output} --resume" in error


@pytest.mark.parametrize(
    "written_by, resumed_by",
    [
        (["pretrain", "--data", "digits", "--epochs", "4"], "train"),
        (["train", "--data", "digits", "--algorithm", "vicreg"], "pretrain"),
        (["train-metric", "--algorithm", "circle", "--data", "digits"], "train"),
        (["train", "--algorithm", "supcon", "--train-classes", "5"], "train-metric"),
    ],
)
def test_resume_takes_the_run_options_from_run_json_whichever_spelling_wrote_them(
    tmp_path, written_by, resumed_by
):
    output = tmp_path / "run"
    options = write_resumable_run(output, written_by)
    argv = [resumed_by, "--output", str(output), "--resume"]
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    args = resumed_options(build_parser().parse_args(argv), explicit, output)
    resumed = vars(resolve_defaults(args, explicit))
    assert {key: resumed[key] for key in RUN_OPTIONS} == {key: options[key] for key in RUN_OPTIONS}
