"""The options of the metric-learning job (`tfsim train-metric`) and their checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.datasets.glyphs import NUM_SEEN_CLASSES as GLYPHS_SEEN_CLASSES

# Supervised metric learning (`cli.metric`): the metric loss of each name.
SUPERVISED_ALGORITHMS = (
    "multisimilarity",
    "triplet",
    "circle",
    "pn",
    "softnn",
    "supcon",
    "arcface",
    "proxyanchor",
    "proxynca",
)
# The supervised job's own defaults (`defaults.DATA_DEFAULTS` has those that depend on the data).
SUPERVISED_DEFAULTS = {"epochs": 12, "batch_size": 48}
# Losses whose gradients are scaled by a large constant (CircleLoss' gamma 80, ArcFace's scale
# 64) take a smaller default learning rate than the others' 0.05: at 0.05 both end the default
# run with a lower seen-class recall@1 and mAP@R than at 0.005.
SUPERVISED_LEARNING_RATES = {"circle": 0.005, "arcface": 0.005}
DEFAULT_TRAIN_CLASSES = 6
DEFAULT_EMBEDDING_SIZE = 128
# Options of the supervised job only, and of the self-supervised job only: giving one to the
# other job is an error rather than silently ignored.
SUPERVISED_ONLY = ("train_classes", "classes_per_batch", "embedding_size", "augment")


def add_supervised_arguments(train: argparse.ArgumentParser, default: Callable[[Any], Any]) -> None:
    """Adds the supervised job's options to the `train` parser."""
    train.add_argument(
        "--train-classes",
        type=int,
        default=default(None),
        metavar="N",
        help="supervised: train on the first N classes only; the others are unseen in "
        "training and show how the embedding generalises. Default: glyphs' seen classes "
        f"(the {GLYPHS_SEEN_CLASSES} Latin letters and digits), else "
        f"{DEFAULT_TRAIN_CLASSES} (the digits 0 to {DEFAULT_TRAIN_CLASSES - 1})",
    )
    train.add_argument(
        "--classes-per-batch",
        type=int,
        default=default(None),
        metavar="C",
        help="supervised: classes in each batch (it holds batch-size / C images of each). "
        "Default: all --train-classes",
    )
    train.add_argument(
        "--embedding-size",
        type=int,
        default=default(DEFAULT_EMBEDDING_SIZE),
        metavar="D",
        help="supervised: size of the L2-normalised embedding the index searches",
    )
    train.add_argument(
        "--augment",
        action=argparse.BooleanOptionalAction,
        default=default(True),
        help="supervised: train on augmented images, never flipped (glyphs: affine warps "
        "and stroke widths; other data: a random resized crop, colour jitter and blur), a "
        "regulariser",
    )


def check_supervised_numbers(args: argparse.Namespace) -> None:
    """Raises `UsageError` if the supervised batch options do not fit together."""
    if args.train_classes < 2:
        raise UsageError(
            f"--train-classes must be at least 2 (a metric loss compares classes); got "
            f"{args.train_classes}."
        )
    classes = args.classes_per_batch
    if classes is None:
        classes = args.train_classes
    elif not 2 <= classes <= args.train_classes:
        raise UsageError(
            f"--classes-per-batch must be between 2 and --train-classes "
            f"({args.train_classes}); got {classes}."
        )
    if args.batch_size % classes or args.batch_size // classes < 2:
        raise UsageError(
            f"--batch-size {args.batch_size} must be a multiple of the {classes} classes per "
            f"batch, with at least 2 images of each (positive pairs); use e.g. --batch-size "
            f"{classes * max(2, args.batch_size // classes)}."
        )
