"""The parsed `tfsim` options resolved and checked.

Everything here runs before any model, device or dataset exists, so that bad
input ends with `tfsim: error: ...` and exit status 2 before work starts: the
job's defaults filled in, the options of an interrupted run taken back on
`--resume`, the numbers and the output folder checked.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path
from typing import Any

from tensorflow_similarity.architectures.registry import MIN_IMAGE_SIZES
from tensorflow_similarity.cli.defaults import (
    ADAM_LEARNING_RATE,
    COMMAND_JOBS,
    DATA_DEFAULTS,
    DEFAULT_ALGORITHMS,
    DEFAULT_IMAGE_SIZE,
    DEFAULT_LEARNING_RATE,
    DEFAULT_METRIC_ALGORITHM,
    JOB_DEFAULTS,
    JOB_TITLES,
    LARS_EXCLUSIONS,
    LARS_LEARNING_RATE,
)
from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.cli.metric_options import (
    DEFAULT_TRAIN_CLASSES,
    SUPERVISED_ALGORITHMS,
    SUPERVISED_LEARNING_RATES,
    SUPERVISED_ONLY,
    check_supervised_numbers,
)
from tensorflow_similarity.cli.run_folder import check_resumable
from tensorflow_similarity.datasets import EMBEDDED_SOURCES
from tensorflow_similarity.models.algorithms import algorithm_names, get_algorithm

# Options that define the run: `--resume` takes them from run.json, and giving a different
# value is an error (the backup would not fit the model or the schedule).
RUN_OPTIONS = (
    "algorithm",
    "backbone",
    "width",
    "sync_bn",
    "bn",
    "sync_group_size",
    "replicas",
    "strategy",
    "data",
    "image_size",
    "epochs",
    "batch_size",
    "optimizer",
    "learning_rate",
    "lars_exclude",
    "projector_dim",
    "seed",
    "limit",
    "train_classes",
    "embedding_size",
    "classes_per_batch",
    "augment",
)
# The options of self-supervised runs only (`metric_options.SUPERVISED_ONLY`: of supervised ones).
SELF_SUPERVISED_ONLY = ("projector_dim", "bn")
# The command that runs each job, which a resume of the other command names.
_COMMAND_OF_JOB = {job: command for command, job in COMMAND_JOBS.items()}


def job_of(args: argparse.Namespace) -> str:
    """The job a parsed training command runs: `"ssl"` or `"supervised"`."""
    if args.command in COMMAND_JOBS:
        return COMMAND_JOBS[args.command]
    return "supervised" if args.algorithm in SUPERVISED_ALGORITHMS else "ssl"


def resolve_defaults(args: argparse.Namespace, explicit: dict[str, Any]) -> argparse.Namespace:
    """Returns `args` with the job's own defaults filled in.

    The self-supervised and supervised jobs have their own epochs and batch
    size. `pretrain` and `train-metric` have only their job's options; `train`
    has both jobs', and refuses the other job's here. The other job's
    options are `None` in the result (and in run.json), whatever the spelling.

    Raises:
        UsageError: If an option does not belong to the job of `--algorithm`.
    """
    supervised = job_of(args) == "supervised"
    if args.algorithm is None:
        algorithm = (
            DEFAULT_METRIC_ALGORITHM if supervised else DEFAULT_ALGORITHMS.get(args.data, "simsiam")
        )
        args = argparse.Namespace(**{**vars(args), "algorithm": algorithm})
    foreign = SELF_SUPERVISED_ONLY if supervised else SUPERVISED_ONLY
    for key in foreign:
        if key in explicit:
            flag = "--" + key.replace("_", "-")
            job, other = (
                ("supervised", "self-supervised")
                if supervised
                else (
                    "self-supervised",
                    "supervised",
                )
            )
            raise UsageError(
                f"{flag} is an option of {other} runs; --algorithm {args.algorithm} is "
                f"{job}. Drop {flag}."
            )
    defaults = {
        **JOB_DEFAULTS["supervised" if supervised else "ssl"],
        "image_size": EMBEDDED_SOURCES.get(args.data, DEFAULT_IMAGE_SIZE),
        **DATA_DEFAULTS.get(args.data, {}).get("supervised" if supervised else "ssl", {}),
    }
    resolved = vars(args).copy()
    if resolved.get("backbone") != "resnet18":
        # The data's default width is resnet18's; the other builders have their own widths.
        defaults["width"] = 1.0
    for key, value in defaults.items():
        if resolved.get(key) is None:
            resolved[key] = value
    if supervised and resolved.get("train_classes") is None:
        resolved["train_classes"] = DEFAULT_TRAIN_CLASSES
    if supervised and "classes_per_batch" not in explicit and resolved["classes_per_batch"]:
        # A data set's default may ask for more classes than --train-classes gives.
        resolved["classes_per_batch"] = min(
            resolved["classes_per_batch"], resolved["train_classes"]
        )
    if resolved.get("learning_rate") is None:
        if resolved["optimizer"] == "adam":
            resolved["learning_rate"] = ADAM_LEARNING_RATE
        elif resolved["optimizer"] == "lars":
            resolved["learning_rate"] = LARS_LEARNING_RATE
        else:
            resolved["learning_rate"] = SUPERVISED_LEARNING_RATES.get(
                args.algorithm, DEFAULT_LEARNING_RATE
            )
    # The other job's options stay out of run.json.
    resolved.update({key: None for key in foreign})
    return argparse.Namespace(**resolved)


def resolve_batch_norm_mode(args: argparse.Namespace, explicit: dict[str, Any]) -> None:
    """Sets `args.bn` and `args.sync_bn` to one batch-norm mode (self-supervised runs).

    `--bn sync` is `--sync-bn`, `--bn per_replica` and `--bn shuffle` are
    `--no-sync-bn`; without `--bn` the mode follows `--sync-bn`.

    Raises:
        UsageError: If `--bn` contradicts an explicit `--sync-bn`/`--no-sync-bn`,
            or is `shuffle` for a method without a key encoder.
    """
    if getattr(args, "bn", None) is None:
        if job_of(args) == "ssl":
            args.bn = "sync" if args.sync_bn else "per_replica"
        return
    wants_sync = args.bn == "sync"
    if "sync_bn" in explicit and bool(explicit["sync_bn"]) != wants_sync:
        given = "--sync-bn" if explicit["sync_bn"] else "--no-sync-bn"
        raise UsageError(
            f"--bn {args.bn} contradicts {given}: --bn sync is --sync-bn, --bn per_replica and "
            "--bn shuffle are --no-sync-bn. Drop one of the two."
        )
    method = get_algorithm(args.algorithm)
    if args.bn == "shuffle" and not method.has_key_encoder:
        able = ", ".join(n for n in algorithm_names() if get_algorithm(n).has_key_encoder)
        raise UsageError(
            f"--bn shuffle permutes a key encoder's batch across replicas, and --algorithm "
            f"{args.algorithm} has none. Use --bn sync or per_replica, or --algorithm {able}."
        )
    args.sync_bn = wants_sync


def resumed_options(
    args: argparse.Namespace, explicit: dict[str, Any], output: Path
) -> argparse.Namespace:
    """Returns `args` with the run options of the interrupted run in `output`.

    Args:
        args: The parsed options.
        explicit: The options given on the command line (no defaults).
        output: The run's folder.

    Returns:
        A namespace with `RUN_OPTIONS` taken from `output/run.json`.

    Raises:
        UsageError: If there is nothing to resume, or an explicit option
            contradicts the saved one.
    """
    check_resumable(output)
    run = json.loads((output / "run.json").read_text())
    saved = run["options"]
    resolved = _resolved_run_options(run)
    for key in (*RUN_OPTIONS, "deterministic"):
        if key in explicit and key in resolved and explicit[key] != resolved[key]:
            flag = "--" + key.replace("_", "-")
            value = resolved.get(key)
            if isinstance(value, bool):
                given = flag if explicit[key] else "--no-" + flag[2:]
                theirs = flag if value else "--no-" + flag[2:]
                difference = f"{given} differs from the interrupted run's {theirs}"
            else:
                difference = (
                    f"{flag} {explicit[key]!r} differs from the interrupted run's {value!r}"
                )
            raise UsageError(
                f"{difference}. --resume continues that run with its own options; drop the "
                "option, or start a new run in another --output."
            )
    command_job = COMMAND_JOBS.get(args.command)
    saved_job = "supervised" if saved.get("algorithm") in SUPERVISED_ALGORITHMS else "ssl"
    if command_job is not None and command_job != saved_job:
        raise UsageError(
            f"{str(output)!r} holds a {JOB_TITLES[saved_job]} run (--algorithm "
            f"{saved.get('algorithm')}), which tfsim {args.command} does not run; continue it "
            f"with: tfsim {_COMMAND_OF_JOB[saved_job]} --output {output} --resume"
        )
    merged = vars(args).copy()
    merged.update({key: saved.get(key) for key in RUN_OPTIONS})
    if isinstance(run.get("deterministic"), bool):
        merged["deterministic"] = run["deterministic"]
    return argparse.Namespace(**merged)


def _resolved_run_options(run: dict[str, Any]) -> dict[str, Any]:
    """The run options of a run.json, each as the run resolved it.

    run.json keeps `--replicas` and `--sync-group-size` as given (`None`
    for the default, so that a resume on this machine resolves them again);
    a resume that spells out the value the default resolved to is the same
    run. `--deterministic` is kept beside the options.
    """
    resolved = {key: None for key in RUN_OPTIONS}
    resolved.update(run.get("options", {}))
    replicas = (run.get("devices") or {}).get("replicas")
    if replicas is not None and resolved.get("strategy") != "multi-worker":
        if resolved.get("replicas") is None:
            resolved["replicas"] = replicas
        if resolved.get("sync_group_size") is None and resolved.get("sync_bn"):
            resolved["sync_group_size"] = replicas
    if "deterministic" in run:
        resolved["deterministic"] = run["deterministic"]
    return resolved


def check_numbers(args: argparse.Namespace) -> None:
    """Raises `UsageError` if a numeric option is out of range."""
    for flag, value, low in (
        ("--epochs", args.epochs, 1),
        ("--eval-every", args.eval_every, 1),
        ("--batch-size", args.batch_size, 1),
        ("--image-size", args.image_size, 1),
        ("--projector-dim", args.projector_dim, 4),
        ("--embedding-size", args.embedding_size, 1),
    ):
        if value is not None and value < low:
            raise UsageError(f"{flag} must be at least {low}; got {value}.")
    if args.algorithm in SUPERVISED_ALGORITHMS:
        check_supervised_numbers(args)
    if not (math.isfinite(args.worker_timeout) and args.worker_timeout > 0):
        raise UsageError(f"--worker-timeout must be a positive number; got {args.worker_timeout}.")
    if args.replicas is not None and args.replicas < 1:
        raise UsageError(f"--replicas must be a positive integer; got {args.replicas}.")
    if args.limit is not None and args.limit < 2:
        raise UsageError(f"--limit must be at least 2 images; got {args.limit}.")
    if not (math.isfinite(args.learning_rate) and args.learning_rate > 0):
        raise UsageError(f"--learning-rate must be positive; got {args.learning_rate}.")
    check_lars_exclude(args)
    if args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer; got {args.seed}.")
    # None: resumed from a run.json written before --width existed (the full width).
    if args.width is not None and not (math.isfinite(args.width) and args.width > 0):
        raise UsageError(f"--width must be a positive number; got {args.width}.")
    if args.width not in (None, 1.0) and args.backbone != "resnet18":
        raise UsageError(
            f"--width applies to --backbone resnet18; --backbone {args.backbone} has its own "
            "fixed widths. Drop --width."
        )
    minimum = MIN_IMAGE_SIZES[args.backbone]
    if args.image_size < minimum:
        raise UsageError(
            f"--backbone {args.backbone} needs --image-size of at least {minimum}; "
            f"got {args.image_size}."
        )
    if args.sync_group_size is not None:
        if not args.sync_bn:
            raise UsageError(
                "--sync-group-size groups synchronised batch norm, but --no-sync-bn turns it "
                "off; drop one of the two."
            )
        if args.sync_group_size < 1:
            raise UsageError(
                f"--sync-group-size must be a positive integer; got {args.sync_group_size}."
            )


def check_lars_exclude(args: argparse.Namespace) -> None:
    """Refuses `--lars-exclude` without `--optimizer lars`, or naming an unknown kind."""
    value = getattr(args, "lars_exclude", None)
    if value is None:
        return
    if args.optimizer != "lars":
        raise UsageError(
            f"--lars-exclude chooses what LARS leaves out, but --optimizer is {args.optimizer}. "
            "Add --optimizer lars, or drop --lars-exclude."
        )
    kinds = value.split(",")
    if kinds == ["none"]:
        return
    unknown = [kind for kind in kinds if kind not in LARS_EXCLUSIONS]
    if unknown or not kinds:
        raise UsageError(
            f"--lars-exclude {value!r}: unknown kind {', '.join(map(repr, unknown))}. Use "
            f"bias, norm, bias,norm or none."
        )


def check_output(output: Path) -> None:
    """Creates `output` if needed; raises `UsageError` if it is not a writable folder."""
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output {str(output)!r} is a file; give a folder.")
    try:
        output.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=output, prefix=".tfsim-write-test"):
            pass
    except OSError as error:
        raise UsageError(
            f"cannot write to --output {str(output)!r} ({error.strerror or error}); "
            "choose a folder you can write to."
        ) from None
