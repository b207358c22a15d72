"""The `tfsim` options: the argument parser and the checks on their values.

Everything here runs before any model, device or dataset exists, so that bad
input ends with `tfsim: error: ...` and exit status 2 before work starts.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tensorflow_similarity.architectures.registry import BUILDERS, MIN_IMAGE_SIZES
from tensorflow_similarity.cli.errors import EXIT_USAGE, UsageError
from tensorflow_similarity.cli.lookup import add_lookup_command
from tensorflow_similarity.cli.metric_options import (
    DEFAULT_TRAIN_CLASSES,
    GLYPHS_SEEN_CLASSES,
    SUPERVISED_ALGORITHMS,
    SUPERVISED_DEFAULTS,
    SUPERVISED_LEARNING_RATES,
    SUPERVISED_ONLY,
    add_supervised_arguments,
    check_supervised_numbers,
)
from tensorflow_similarity.cli.run_folder import check_resumable
from tensorflow_similarity.datasets import EMBEDDED_SOURCES
from tensorflow_similarity.models.contrastive_model import ALGORITHMS

STRATEGIES = ("mirrored", "multi-worker", "one-device")

# The default job must finish in a few minutes on two CPU cores: a full-width
# ResNet-18 costs about 4x more per image at 16x16 than at the digits' own 8x8.
DEFAULT_IMAGE_SIZE = 8
DEFAULT_EPOCHS = 3
DEFAULT_BATCH_SIZE = 128
DEFAULT_LEARNING_RATE = 0.05
DEFAULT_CPU_REPLICAS = 2
# Seconds a task of --strategy multi-worker waits for the cluster's others to start.
DEFAULT_WORKER_TIMEOUT = 300.0
OPTIMIZERS = ("sgd", "adam")
ADAM_LEARNING_RATE = 1e-3
# Defaults of each job that depend on the embedded data set (the others apply otherwise).
DATA_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "glyphs": {
        "supervised": {
            "train_classes": GLYPHS_SEEN_CLASSES,
            "epochs": 12,
            "batch_size": 64,
            "classes_per_batch": 16,
            "optimizer": "adam",
            # An evaluation (batch norm statistics, 2,140 images indexed, 972 queries) costs
            # about an epoch of training on two CPU cores: after epochs 4, 8 and 12.
            "eval_every": 4,
        },
        # Of the settings tried, SimCLR with Adam does best in a short run on glyphs; SimSiam
        # (SGD or Adam) collapses there. A quarter-width ResNet-18 trains 30 epochs in the time
        # the full width trains 4, and gains over its untrained network where 5 full-width
        # epochs did not (benchmark.glyphs.ssl_length, REPORT.md).
        "ssl": {"optimizer": "adam", "epochs": 30, "width": 0.25},
    },
}
# The self-supervised algorithm of `tfsim train` with no --algorithm, by data (else simsiam).
DEFAULT_ALGORITHMS = {"glyphs": "simclr"}

# Options that define the run: `--resume` takes them from run.json, and giving a different
# value is an error (the backup would not fit the model or the schedule).
RUN_OPTIONS = (
    "algorithm",
    "backbone",
    "width",
    "sync_bn",
    "sync_group_size",
    "replicas",
    "strategy",
    "data",
    "image_size",
    "epochs",
    "batch_size",
    "optimizer",
    "learning_rate",
    "projector_dim",
    "seed",
    "limit",
    "train_classes",
    "embedding_size",
    "classes_per_batch",
    "augment",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"tfsim: error: {message}\n")


# The two jobs, by their key in `DATA_DEFAULTS`: the words that name them, and their defaults
# that do not depend on the data.
JOB_TITLES = {"ssl": "self-supervised", "supervised": "supervised"}
_JOB_DEFAULTS: dict[str, dict[str, Any]] = {
    "ssl": {
        "epochs": DEFAULT_EPOCHS,
        "batch_size": DEFAULT_BATCH_SIZE,
        "optimizer": "sgd",
        "eval_every": 1,
        "width": 1.0,
    },
    "supervised": {**SUPERVISED_DEFAULTS, "optimizer": "sgd", "eval_every": 1, "width": 1.0},
}
# The metric loss of `tfsim train-metric` with no --algorithm (`tfsim train` has none).
DEFAULT_METRIC_ALGORITHM = "multisimilarity"
# The job of each training command; `train` runs the job its --algorithm names.
COMMAND_JOBS = {"pretrain": "ssl", "train-metric": "supervised"}
_COMMAND_OF_JOB = {job: command for command, job in COMMAND_JOBS.items()}
BOTH_JOBS = ("ssl", "supervised")


def job_of(args: argparse.Namespace) -> str:
    """The job a parsed training command runs: `"ssl"` or `"supervised"`."""
    if args.command in COMMAND_JOBS:
        return COMMAND_JOBS[args.command]
    return "supervised" if args.algorithm in SUPERVISED_ALGORITHMS else "ssl"


def _data_default_text(key: str, jobs: tuple[str, ...]) -> str:
    """The help text of an option's defaults for `jobs` and, where `DATA_DEFAULTS` differ, data.

    With both jobs, each part is titled (`self-supervised: ...; supervised: ...`).
    """
    parts = []
    for job in jobs:
        by_data = [
            f"{defaults[job][key]} on {data}"
            for data, defaults in DATA_DEFAULTS.items()
            if key in defaults[job]
        ]
        own = _JOB_DEFAULTS[job][key]
        text = ", ".join([*by_data, f"else {own}" if by_data else str(own)])
        parts.append(f"{JOB_TITLES[job]}: {text}" if len(jobs) > 1 else text)
    return "; ".join(parts)


def _algorithm_help(jobs: tuple[str, ...]) -> str:
    self_supervised = (
        ", ".join(f"{name} on {data}" for data, name in DEFAULT_ALGORITHMS.items())
        + ", else simsiam"
    )
    if jobs == ("ssl",):
        return (
            "self-supervised algorithm: the loss, projector and predictor of its paper. "
            f"Default: {self_supervised}"
        )
    if jobs == ("supervised",):
        return (
            "the metric loss the SimilarityModel trains with on the labelled classes. "
            f"Default: {DEFAULT_METRIC_ALGORITHM}"
        )
    return (
        "self-supervised algorithm (loss, projector and predictor of its paper: "
        + ", ".join(ALGORITHMS)
        + "), or the metric loss of supervised metric learning of a SimilarityModel on "
        "labelled classes (" + ", ".join(SUPERVISED_ALGORITHMS) + f"). Default: {self_supervised}"
    )


def _learning_rate_help(jobs: tuple[str, ...]) -> str:
    by_loss = ""
    if "supervised" in jobs:
        by_loss = (
            ", "
            + ", ".join(f"{rate} for {name}" for name, rate in SUPERVISED_LEARNING_RATES.items())
            + " (their losses scale gradients by a large constant)"
        )
    return (
        f"peak learning rate (cosine decay). Default: {ADAM_LEARNING_RATE} with adam; "
        f"with sgd {DEFAULT_LEARNING_RATE}{by_loss}"
    )


def _add_run_arguments(
    command: argparse.ArgumentParser, default: Callable[[Any], Any], jobs: tuple[str, ...]
) -> None:
    """Adds the options of a training command that runs `jobs` (one job, or both for `train`)."""
    command.add_argument(
        "--algorithm",
        choices=tuple(
            name for job in jobs for name in (ALGORITHMS if job == "ssl" else SUPERVISED_ALGORITHMS)
        ),
        default=default(None),
        help=_algorithm_help(jobs),
    )
    command.add_argument(
        "--backbone",
        choices=tuple(BUILDERS),
        default=default("resnet18"),
        help="backbone network, trained from scratch; smallest image side: "
        + ", ".join(f"{name} {size}" for name, size in MIN_IMAGE_SIZES.items()),
    )
    command.add_argument(
        "--width",
        type=float,
        default=default(None),
        metavar="W",
        help="resnet18 only: multiplies the number of filters of every layer (64 to 512 at 1; "
        "0.25 has about 1/16 of the computation). Default: " + _data_default_text("width", jobs),
    )
    command.add_argument(
        "--sync-bn",
        action=argparse.BooleanOptionalAction,
        default=default(True),
        help="synchronise batch norm across replicas (global-batch statistics); "
        "--no-sync-bn normalises each replica's batch on its own",
    )
    command.add_argument(
        "--sync-group-size",
        type=int,
        default=default(None),
        metavar="G",
        help="synchronise batch norm within groups of G consecutive replicas "
        "(GroupSyncBatchNorm); G must divide the number of replicas. Default: all replicas",
    )
    command.add_argument(
        "--replicas",
        type=int,
        default=default(None),
        metavar="N",
        help="replicas of --strategy mirrored: the first N GPUs, or N logical CPU devices "
        f"when there is no GPU. Default: all visible GPUs, else {DEFAULT_CPU_REPLICAS} CPU "
        "devices",
    )
    command.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=default("mirrored"),
        help="tf.distribute strategy: MirroredStrategy on this machine, "
        "MultiWorkerMirroredStrategy over the cluster in TF_CONFIG (replicas: workers x "
        "local GPUs, or one CPU per worker), or OneDeviceStrategy",
    )
    command.add_argument(
        "--worker-timeout",
        type=float,
        default=default(DEFAULT_WORKER_TIMEOUT),
        metavar="SECONDS",
        help="--strategy multi-worker: how long each task waits for the cluster's other tasks "
        "to start; past it the run ends with an error naming the tasks that never answered",
    )
    command.add_argument(
        "--data",
        default=default("glyphs"),
        metavar="SOURCE",
        help="'glyphs' (2,626 characters drawn in the fonts matplotlib ships: 62 Latin "
        "classes, then 81 Greek and Cyrillic ones; no network needed), 'digits' "
        "(scikit-learn's 1,797 handwritten 8x8 digits), a folder with one sub-folder of "
        "images per class, or tfds:NAME (TensorFlow Datasets, if installed and its data "
        "reachable). Each class is split 80/20 into train/test",
    )
    command.add_argument(
        "--image-size",
        type=int,
        default=default(None),
        metavar="PIXELS",
        help="side of the square images the model sees (the data are resized). Default: "
        + ", ".join(f"{size} for {name}" for name, size in EMBEDDED_SOURCES.items())
        + f", {DEFAULT_IMAGE_SIZE} for other data: small, so that the default runs stay fast "
        "on CPUs",
    )
    command.add_argument(
        "--epochs",
        type=int,
        default=default(None),
        help="training epochs. Default: " + _data_default_text("epochs", jobs),
    )
    command.add_argument(
        "--eval-every",
        type=int,
        default=default(None),
        metavar="N",
        help="evaluate (batch norm statistics recomputed, then the figures) after every N "
        "epochs and after the last; history.json has figures for those epochs only. "
        "Default: " + _data_default_text("eval_every", jobs),
    )
    # What a batch holds, after "(at least one image each)".
    batches = {
        BOTH_JOBS: "; supervised batches hold --classes-per-batch classes with the same number "
        "of images each. ",
        ("supervised",): ". Each batch holds --classes-per-batch classes with the same number "
        "of images each. ",
        ("ssl",): ". ",
    }[jobs]
    command.add_argument(
        "--batch-size",
        type=int,
        default=default(None),
        help="global batch size, split over the replicas (at least one image each)"
        + batches
        + "Default: "
        + _data_default_text("batch_size", jobs),
    )
    command.add_argument(
        "--optimizer",
        choices=OPTIMIZERS,
        default=default(None),
        help="sgd (momentum 0.9, weight decay 5e-4) or adam, with cosine decay of the "
        "learning rate. Default: " + _data_default_text("optimizer", jobs),
    )
    command.add_argument(
        "--learning-rate",
        type=float,
        default=default(None),
        metavar="LR",
        help=_learning_rate_help(jobs),
    )
    if "supervised" in jobs:
        add_supervised_arguments(command, default)
    if "ssl" in jobs:
        command.add_argument(
            "--projector-dim",
            type=int,
            default=default(512),
            metavar="D",
            help="self-supervised: width of the projector's layers (SimSiam's predictor: D/4); "
            "the papers use 2048-8192 for ImageNet",
        )
    command.add_argument(
        "--seed",
        type=int,
        default=default(0),
        help="seed of the split, the weights, and each epoch's order and views: a run "
        "repeated with the same options on the same machine gives the same model",
    )
    command.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=default(True),
        help="run TensorFlow's ops deterministically (tf.config.experimental."
        "enable_op_determinism), so that a seeded run is reproducible and a resumed run "
        "ends as the uninterrupted one would; --no-deterministic may be faster on GPUs",
    )
    command.add_argument(
        "--limit",
        type=int,
        default=default(None),
        metavar="N",
        help="use at most N images (a random subset), for quick runs. Default: all",
    )
    command.add_argument(
        "--output",
        default=default("tfsim-output"),
        metavar="DIR",
        help="folder for the model, history, TensorBoard logs and plots (created if needed). "
        "A folder that holds a run is refused unless --resume or --overwrite is given",
    )
    command.add_argument(
        "--resume",
        action="store_true",
        default=default(False),
        help="continue the interrupted run in --output from its last completed epoch (or "
        "from the start if it completed none), with the options it was started with",
    )
    command.add_argument(
        "--overwrite",
        action="store_true",
        default=default(False),
        help="delete the run in --output before training: the files and folders a run writes "
        "(model.keras, model.index/, run.json, history.json, summary.json, logs/, backup/, "
        "the plots), and nothing else",
    )
    command.add_argument(
        "--verbose",
        action="store_true",
        default=default(False),
        help="show TensorFlow's C++ log (hidden by default unless TF_CPP_MIN_LOG_LEVEL is set)",
    )


# Where a user finds how long a self-supervised run takes to gain: figures live in the report.
SSL_LENGTH_NOTE = (
    "How the kNN accuracy grows with the length of the run and the width of the network, "
    "against the untrained network and the raw pixels: see benchmark/results/REPORT.md."
)

# The training commands: the jobs each runs, its line in `tfsim --help`, and its description.
TRAINING_COMMANDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "pretrain": (
        ("ssl",),
        "self-supervised pretraining (simsiam, simclr, barlow, vicreg) and the kNN accuracy of "
        "its embeddings",
        "Pretrain an embedding model without labels, with synchronised batch norm under "
        "tf.distribute: a ContrastiveModel trained with the loss, projector and predictor of "
        "its algorithm's paper, and the kNN accuracy of held-out images (clean and augmented) "
        "before training and after each epoch. With no options: SimCLR with Adam, a "
        "quarter-width ResNet-18, sync batch norm over 2 replicas, glyphs at 16x16, 30 epochs. "
        + SSL_LENGTH_NOTE,
    ),
    "train-metric": (
        ("supervised",),
        "supervised metric learning (multisimilarity, triplet, circle, pn, softnn, supcon, "
        "arcface), an index of every class, and recall@1 and mAP@R",
        "Train a SimilarityModel with a metric loss on the first --train-classes classes, with "
        "synchronised batch norm under tf.distribute and class-balanced batches; index the "
        "training images of every class and report recall@1 and mAP@R of held-out images "
        "before training and after each epoch, seen and unseen classes apart. `tfsim lookup` "
        "searches the finished run's index. With no options: MultiSimilarity with Adam, "
        "ResNet-18, sync batch norm over 2 replicas, glyphs at 16x16 (62 seen classes, 16 "
        "classes x 4 images a batch), 12 epochs.",
    ),
    "train": (
        BOTH_JOBS,
        "either job, chosen by --algorithm: the compatible spelling of pretrain and train-metric",
        "Train an embedding model with synchronised batch norm under tf.distribute: "
        "self-supervised pretraining (simsiam, simclr, barlow, vicreg; kNN accuracy of "
        "held-out images) or supervised metric learning (multisimilarity, triplet, circle, "
        "pn, softnn, supcon, arcface; recall@1 and mAP@R of held-out images in an index of "
        "every class, seen and unseen classes apart). The job is the one --algorithm names, "
        "as `tfsim pretrain` or `tfsim train-metric` would run it; an option of the other job "
        "is an error. With no options: SimCLR with Adam, a quarter-width ResNet-18, sync batch "
        "norm over 2 replicas, glyphs at 16x16, 30 epochs. " + SSL_LENGTH_NOTE,
    ),
}


def build_parser(suppress_defaults: bool = False) -> argparse.ArgumentParser:
    """Returns the `tfsim` argument parser.

    Its commands: `pretrain` (self-supervised) and `train-metric` (metric
    learning), each with its own job's options only; `train`, the
    compatible spelling of both, which runs the job its `--algorithm` names
    and takes both jobs' options (refusing the other job's after parsing,
    in `resolve_defaults`); and `lookup`.

    Args:
        suppress_defaults: Leave options that are not given out of the parsed
            namespace (used to tell explicit options from defaults on
            `--resume`). Defaults to `False`.

    Returns:
        An `argparse.ArgumentParser` with the `pretrain`, `train-metric`,
        `train` and `lookup` sub-commands.
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress_defaults else value

    parser = _Parser(
        prog="tfsim",
        description="Self-supervised pretraining and metric learning with exact synchronised "
        "batch norm (Keras 3).",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True
    for name, (jobs, summary, description) in TRAINING_COMMANDS.items():
        command = commands.add_parser(
            name,
            help=summary,
            description=description,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        _add_run_arguments(command, default, jobs)
    add_lookup_command(commands)
    return parser


SELF_SUPERVISED_ONLY = ("projector_dim",)


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
        **_JOB_DEFAULTS["supervised" if supervised else "ssl"],
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
        resolved["learning_rate"] = (
            ADAM_LEARNING_RATE
            if resolved["optimizer"] == "adam"
            else SUPERVISED_LEARNING_RATES.get(args.algorithm, DEFAULT_LEARNING_RATE)
        )
    # The other job's options stay out of run.json.
    resolved.update({key: None for key in foreign})
    return argparse.Namespace(**resolved)


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
