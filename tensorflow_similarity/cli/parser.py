"""The `tfsim` argument parser: its commands and their options.

The defaults it prints live in `defaults`; the checks and the resolution of
the parsed options in `options`; the metric job's own options in
`metric_options`, lookup's in `lookup`, export's in `export`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from tensorflow_similarity.architectures.registry import BUILDERS, MIN_IMAGE_SIZES
from tensorflow_similarity.cli.defaults import (
    ADAM_LEARNING_RATE,
    BOTH_JOBS,
    DATA_DEFAULTS,
    DEFAULT_ALGORITHMS,
    DEFAULT_CPU_REPLICAS,
    DEFAULT_IMAGE_SIZE,
    DEFAULT_LEARNING_RATE,
    DEFAULT_METRIC_ALGORITHM,
    DEFAULT_WORKER_TIMEOUT,
    JOB_DEFAULTS,
    JOB_TITLES,
    LARS_LEARNING_RATE,
    LARS_REFERENCE_BATCH,
)
from tensorflow_similarity.cli.errors import EXIT_USAGE
from tensorflow_similarity.cli.export import add_export_command
from tensorflow_similarity.cli.lookup import add_lookup_command
from tensorflow_similarity.cli.metric_options import (
    SUPERVISED_ALGORITHMS,
    SUPERVISED_LEARNING_RATES,
    add_supervised_arguments,
)
from tensorflow_similarity.datasets import EMBEDDED_SOURCES
from tensorflow_similarity.models.algorithms import (
    ENTRY_POINT_GROUP,
    algorithm_names,
    get_algorithm,
    load_entry_points,
)
from tensorflow_similarity.models.shuffle_batch_norm import BN_MODES

STRATEGIES = ("mirrored", "multi-worker", "one-device")
OPTIMIZERS = ("sgd", "adam", "lars")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"tfsim: error: {message}\n")


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
        own = JOB_DEFAULTS[job][key]
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
            "self-supervised algorithm: the loss, projector, predictor and views of its paper; "
            "the methods registered (models.algorithms.register_algorithm) before the command "
            f"line is parsed, the installed packages' under the entry-point group "
            f"{ENTRY_POINT_GROUP} among them. Default: {self_supervised}"
        )
    if jobs == ("supervised",):
        return (
            "the metric loss the SimilarityModel trains with on the labelled classes. "
            f"Default: {DEFAULT_METRIC_ALGORITHM}"
        )
    return (
        "self-supervised algorithm (loss, projector and predictor of its paper: "
        + ", ".join(algorithm_names())
        + "), or the metric loss of supervised metric learning of a SimilarityModel on "
        "labelled classes (" + ", ".join(SUPERVISED_ALGORITHMS) + f"). Default: {self_supervised}"
    )


def _predictor_ratios() -> str:
    """`SimSiam: 1/4; BYOL: 16; ...`: each registered method's predictor width ratio."""
    methods = [get_algorithm(name) for name in algorithm_names()]
    return "; ".join(
        f"{method.display_name}: {Fraction(method.predictor_hidden_ratio).limit_denominator()}"
        for method in methods
        if method.has_predictor
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
        f"peak learning rate (cosine decay); with lars, the rate at a batch of "
        f"{LARS_REFERENCE_BATCH}. Default: {ADAM_LEARNING_RATE} with adam; "
        f"{LARS_LEARNING_RATE} with lars; with sgd {DEFAULT_LEARNING_RATE}{by_loss}"
    )


def _add_run_arguments(
    command: argparse.ArgumentParser, default: Callable[[Any], Any], jobs: tuple[str, ...]
) -> None:
    """Adds the options of a training command that runs `jobs` (one job, or both for `train`)."""
    command.add_argument(
        "--algorithm",
        choices=tuple(
            name
            for job in jobs
            for name in (algorithm_names() if job == "ssl" else SUPERVISED_ALGORITHMS)
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
    if "ssl" in jobs:
        command.add_argument(
            "--bn",
            choices=BN_MODES,
            default=default(None),
            help="batch norm across replicas, the other spelling of --sync-bn: per_replica "
            "(each replica's own statistics: --no-sync-bn), sync (the global batch's: "
            "--sync-bn), shuffle (per-replica, with the key encoder's batch permuted across "
            "the replicas and restored, so that a query and its key never share statistics; "
            "methods with a key encoder: "
            + ", ".join(n for n in algorithm_names() if get_algorithm(n).has_key_encoder)
            + "; 2 or more replicas). Default: as --sync-bn says",
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
        "learning rate; or lars (LARS: momentum 0.9, weight decay 1e-6, trust coefficient "
        "0.001, batch norm parameters and biases excluded), its learning rate "
        "--learning-rate x batch size / "
        f"{LARS_REFERENCE_BATCH}, warmed up over the first tenth of the steps, then cosine "
        "decay. Default: " + _data_default_text("optimizer", jobs),
    )
    command.add_argument(
        "--lars-exclude",
        default=default(None),
        metavar="KINDS",
        help="with --optimizer lars, the variables left out of weight decay and trust-ratio "
        "adaptation: bias, norm (batch norm's scale and offset), bias,norm or none. Default: "
        "bias,norm",
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
            help="self-supervised: width of the projector's layers; a predictor's hidden layer "
            f"is D times the method's ratio ({_predictor_ratios()}); "
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
# `{methods}` is replaced by the registered self-supervised methods when the parser is built.
TRAINING_COMMANDS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "pretrain": (
        ("ssl",),
        "self-supervised pretraining ({methods}) and the kNN accuracy of its embeddings",
        "Pretrain an embedding model without labels, with synchronised batch norm under "
        "tf.distribute: a ContrastiveModel trained with the loss, projector and predictor of "
        "its algorithm's paper, and the kNN accuracy of held-out images (clean and augmented) "
        "before training and after each epoch, with a linear probe's accuracy before and after "
        "training. With no options: SimCLR with Adam, a "
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
        "self-supervised pretraining ({methods}; kNN accuracy of held-out images) or "
        "supervised metric learning (multisimilarity, triplet, circle, "
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
    in `resolve_defaults`); `lookup`; and `export` (a run as a SavedModel
    for serving).

    It first loads the self-supervised methods installed packages declare
    (`models.algorithms.load_entry_points`), so that `--algorithm` offers
    every registered method.

    Args:
        suppress_defaults: Leave options that are not given out of the parsed
            namespace (used to tell explicit options from defaults on
            `--resume`). Defaults to `False`.

    Returns:
        An `argparse.ArgumentParser` with the `pretrain`, `train-metric`,
        `train`, `lookup` and `export` sub-commands.
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress_defaults else value

    load_entry_points()
    methods = ", ".join(algorithm_names())

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
            help=summary.format(methods=methods),
            description=description.format(methods=methods),
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        _add_run_arguments(command, default, jobs)
    add_lookup_command(commands)
    add_export_command(commands)
    return parser
