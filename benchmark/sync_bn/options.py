"""The command line of `python -m benchmark.sync_bn`: its options and the `RunConfig` they give.

`parse_args` reads the options (`--sections`, `--replicas` and `--resnet-models`
are checked by their own parsers); `run_config` resolves them, with the full or
the `--quick` presets, into the `RunConfig` of `common.py`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

from benchmark.sync_bn.common import (
    COMPUTE_BOUND,
    LATENCY_BOUND,
    NUM_LOGICAL_DEVICES,
    RESNET18,
    RESNET50,
    SECTIONS,
    RunConfig,
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "Compare plain, Keras-synchronised and tensorflow-similarity batch norm under "
            "MirroredStrategy: collectives per layer, step time, variance robustness."
        )
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Smoke run (1 and 2 replicas, smaller models, few steps); a few minutes.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=(
            "Folder for sync_bn.md and sync_bn.json (default: benchmark/results; with "
            "--quick, a new temporary folder)."
        ),
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "gpu"),
        default="cpu",
        help="cpu: 8 logical CPUs (default). gpu: 8 logical GPUs on the first physical GPU.",
    )
    parser.add_argument(
        "--gpu-memory-mb",
        type=int,
        default=4096,
        help="Memory limit of each logical GPU with --device gpu (default: 4096).",
    )
    parser.add_argument(
        "--sections",
        type=parse_sections,
        default=SECTIONS,
        help=(
            f"Comma-separated tables to measure, among {','.join(SECTIONS)} (default: all). "
            "`step_time` is the small-model table, `resnet` the ResNet-18/50 one. Tables not "
            "measured are kept from an existing report in --out for the same --device."
        ),
    )
    parser.add_argument(
        "--replicas",
        type=parse_replicas,
        default=None,
        help=(
            "Comma-separated replica counts of the step-time tables, e.g. 1,2,4 "
            "(default: 1,2,4,8; with --quick, the quick counts)."
        ),
    )
    parser.add_argument(
        "--isolate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=(
            "Time each ResNet and replica count of the resnet section in a process of its own "
            "(default: on, off with --quick). One process holding every variant of every "
            "setting ran out of 24 GB at ResNet-50 with 8 replicas: TensorFlow keeps memory "
            "that clear_session() releases to Python, not to the system."
        ),
    )
    parser.add_argument(
        "--resnet-models",
        type=parse_resnet_models,
        default=None,
        help="Comma-separated ResNet settings of the resnet section (default: all): ResNet-50",
    )
    return parser.parse_args(argv)


def parse_resnet_models(text: str) -> tuple[str, ...]:
    known = (RESNET18.name, RESNET50.name)
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown ResNet setting(s) {unknown or text!r}; choose from {', '.join(known)}"
        )
    return names


def parse_sections(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown section(s) {unknown or text!r}; choose a comma-separated subset of "
            f"{','.join(SECTIONS)}, e.g. --sections resnet,multiworker,floor"
        )
    return tuple(name for name in SECTIONS if name in names)


def parse_replicas(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        counts = ()
    if not counts or not all(1 <= k <= NUM_LOGICAL_DEVICES for k in counts):
        raise argparse.ArgumentTypeError(
            f"--replicas {text!r}: expected comma-separated integers from 1 to "
            f"{NUM_LOGICAL_DEVICES} (the logical devices), e.g. --replicas 1,2,4"
        )
    return counts


def run_config(args: argparse.Namespace) -> RunConfig:
    config = _base_run_config(args)
    if args.resnet_models is not None:
        resnets = tuple(r for r in config.resnets if r.name in args.resnet_models)
        config = dataclasses.replace(config, resnets=resnets)
    if args.replicas is None:
        return config
    return dataclasses.replace(
        config,
        replica_counts=args.replicas,
        resnets=tuple(dataclasses.replace(r, replica_counts=args.replicas) for r in config.resnets),
    )


def _base_run_config(args: argparse.Namespace) -> RunConfig:
    if args.quick:
        return RunConfig(
            device=args.device,
            replica_counts=(1, 2),
            reps=3,
            steps_per_rep=1,
            warmup_steps=1,
            probe_replicas=2,
            quick=True,
            # Tracing dominates a smoke run, and its cost grows with the layer count.
            settings=(
                dataclasses.replace(LATENCY_BOUND, blocks=1),
                dataclasses.replace(COMPUTE_BOUND, image_size=16, blocks=1),
            ),
            sections=args.sections,
            # Synchronised ResNets take minutes to trace; a smoke run covers the code
            # path with ResNet-18 on 8x8 images, on one replica here, two processes below.
            resnets=(dataclasses.replace(RESNET18, image_size=8, replica_counts=(1,)),),
            resnet_reps=2,
            multiworker=dataclasses.replace(RESNET18, image_size=8, replica_counts=(2,)),
            multiworker_reps=2,
            multiworker_variants=("plain", "ours"),
            # Two counts: the scaling model fits bytes per layer as linear in K.
            floor_replicas=(2, 4),
        )
    return RunConfig(
        device=args.device,
        replica_counts=(1, 2, 4, 8),
        reps=15,
        steps_per_rep=2,
        warmup_steps=2,
        probe_replicas=4,
        quick=False,
        sections=args.sections,
        resnets=(RESNET18, RESNET50),
        resnet_reps=7,
        multiworker=dataclasses.replace(RESNET18, replica_counts=(2,)),
        multiworker_reps=5,
        floor_replicas=(2, 4, 8),
    )
