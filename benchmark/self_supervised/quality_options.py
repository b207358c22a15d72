"""The command line of `python -m benchmark.self_supervised.quality`: its options and `RunConfig`.

`parse_args` reads the options, `run_config` resolves them (the `--quick` presets
and the defaults) into the frozen `RunConfig` that the rest of the benchmark reads,
rejecting bad values before any work.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

from benchmark.self_supervised.quality_tables import ALGORITHMS

# Three epochs of the glyphs' 2,140 training images keep the full run (54 trainings) near
# 20 minutes on 2 cores.
DEFAULT_EPOCHS = 3


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What one invocation trains, derived from the command line."""

    data: str
    image_size: int
    width: int
    epochs: int
    batch_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    algorithms: tuple[str, ...]
    limit: int | None
    learning_rate: float
    projector_dim: int
    quick: bool


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "kNN accuracy of SimSiam, SimCLR and Barlow Twins with per-replica batch norm, "
            "synchronised batch norm, and one device holding the global batch."
        )
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Smoke run: SimCLR only, 1 seed, 1 epoch, 256 images, batch 8; under 2 minutes.",
    )
    parser.add_argument(
        "--data",
        default="glyphs",
        help="'glyphs' (the package's, default), 'digits' (scikit-learn), a folder with one "
        "sub-folder of images per class, or 'tfds:NAME' (as the tfsim command).",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=(
            "Folder for ssl_quality.md and ssl_quality.json (default: benchmark/results; with "
            "--quick, a new temporary folder)."
        ),
    )
    parser.add_argument("--image-size", type=int, default=16, help="Image side (default: 16).")
    parser.add_argument(
        "--width", type=int, default=16, help="Channels of the backbone's first stage (16)."
    )
    parser.add_argument(
        "--epochs", type=int, default=None, help=f"Epochs (default: {DEFAULT_EPOCHS})."
    )
    parser.add_argument(
        "--batch-sizes",
        type=int,
        nargs="+",
        default=None,
        help="Per-replica batch sizes (default: 8 32).",
    )
    parser.add_argument("--seeds", type=int, default=None, help="Number of seeds (default: 3).")
    parser.add_argument(
        "--algorithms",
        nargs="+",
        choices=ALGORITHMS,
        default=None,
        help="Algorithms to train (default: all three).",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="Use at most this many images (default: all)."
    )
    parser.add_argument(
        "--learning-rate", type=float, default=2e-3, help="Adam learning rate (default: 2e-3)."
    )
    return parser.parse_args(argv)


def run_config(args: argparse.Namespace) -> RunConfig:
    """Resolves the command line into a `RunConfig`, rejecting bad values before any work.

    Raises:
        SystemExit: With a message naming the bad option and what to pass instead.
    """
    quick = args.quick
    config = RunConfig(
        data=args.data,
        image_size=args.image_size,
        width=args.width,
        epochs=args.epochs if args.epochs is not None else (1 if quick else DEFAULT_EPOCHS),
        batch_sizes=tuple(args.batch_sizes or ((8,) if quick else (8, 32))),
        seeds=tuple(range(args.seeds if args.seeds is not None else (1 if quick else 3))),
        # One algorithm keeps the smoke run to three traced models; SimCLR is the one the
        # literature expects per-replica statistics to hurt most.
        algorithms=tuple(args.algorithms or (("simclr",) if quick else ALGORITHMS)),
        limit=args.limit if args.limit is not None else (256 if quick else None),
        learning_rate=args.learning_rate,
        projector_dim=64,
        quick=quick,
    )
    for name, value, low in (
        ("--image-size", config.image_size, 8),
        ("--width", config.width, 1),
        ("--epochs", config.epochs, 1),
        ("--seeds", len(config.seeds), 1),
    ):
        if value < low:
            raise SystemExit(f"{name} must be at least {low}; got {value}.")
    if any(b < 2 for b in config.batch_sizes):
        # Batch norm and the losses need at least 2 samples per replica.
        raise SystemExit(f"--batch-sizes must all be at least 2; got {list(config.batch_sizes)}.")
    if not config.learning_rate > 0:
        raise SystemExit(f"--learning-rate must be positive; got {config.learning_rate}.")
    return config
