"""The speed cost of `tfsim train --deterministic` on this machine.

Runs the default `tfsim train` job (SimSiam, ResNet-18, the digits at 8x8,
global batch 128 over 2 replicas, 3 epochs) with `--deterministic` (TensorFlow's
op determinism, the default) and with `--no-deterministic`, alternating the
two, each `--repeats` times in a fresh process, and reads the training
throughput (images per second over the epochs after the first, which also
builds the graph) from each run's `summary.json`. It also says whether the
repeats of each mode ended with the same losses.

Measured on CPUs only: the machines this project is developed on have no GPU.
On GPUs op determinism also selects deterministic cuDNN and scatter kernels,
which can cost more; run this benchmark there before choosing
`--no-deterministic`.

    python -m benchmark.determinism           # the default job; about 10 minutes on 2 cores
    python -m benchmark.determinism --quick   # 240 images, 2 epochs, 1 repeat (smoke run)

A full run writes `benchmark/results/determinism.json` and `.md`; a quick run
writes to a new temporary folder (printed) unless `--out` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmark.common import markdown_table, output_folder

QUICK_OPTIONS = [
    "--data",
    "digits",
    "--limit",
    "240",
    "--batch-size",
    "32",
    "--projector-dim",
    "32",
    "--epochs",
    "2",
]
MODES = ("--deterministic", "--no-deterministic")


def run_once(mode: str, options: list[str], folder: Path) -> dict:
    """Runs `tfsim train` once in a fresh process; returns its summary and losses."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "tensorflow_similarity", "train", *options, mode]
    result = subprocess.run(
        [*command, "--output", str(folder)], env=env, capture_output=True, text=True
    )
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    summary = json.loads((folder / "summary.json").read_text())
    history = json.loads((folder / "history.json").read_text())
    return {
        "images_per_second": summary["images_per_second"],
        "seconds_per_epoch": summary["seconds_per_epoch"],
        "losses": [epoch["loss"] for epoch in history["epochs"]],
    }


def measure(options: list[str], repeats: int, scratch: Path) -> dict:
    """Runs each mode `repeats` times, alternating; returns the runs of each."""
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for repeat in range(repeats):
        for mode in MODES:
            run = run_once(mode, options, scratch / f"{mode.strip('-')}-{repeat}")
            print(f"{mode}: {run['images_per_second']:.1f} images/s", flush=True)
            runs[mode].append(run)
    return runs


def _same_losses(runs: list[dict]) -> str:
    if len(runs) < 2:
        return "n/a (1 run)"
    return "yes" if all(r["losses"] == runs[0]["losses"] for r in runs) else "no"


def render(payload: dict) -> str:
    """The markdown report of a results payload."""
    runs = payload["runs"]
    speed = {mode: statistics.median(r["images_per_second"] for r in runs[mode]) for mode in MODES}
    rows = [
        (
            mode,
            ", ".join(f"{r['images_per_second']:.1f}" for r in runs[mode]),
            f"{speed[mode]:.1f}",
            _same_losses(runs[mode]),
        )
        for mode in MODES
    ]
    ratio = speed["--deterministic"] / speed["--no-deterministic"]
    return "\n\n".join(
        [
            "# Speed cost of `tfsim train --deterministic`",
            f"`{' '.join(['tfsim train', *payload['options']])}` on {payload['machine']}, "
            f"{payload['repeats']} run(s) per mode, alternating"
            f"{' (--quick)' if payload['quick'] else ''}. CPU only: no GPU was available.",
            markdown_table(
                ["mode", "images/s per run", "median images/s", "same losses in every run"],
                rows,
            ),
            f"Deterministic / non-deterministic throughput: **{ratio:.2f}**.",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 240 images, 2 epochs")
    parser.add_argument("--repeats", type=int, default=None, help="runs per mode (2; quick: 1)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 2)
    out = output_folder(args.out, args.quick, "determinism")
    out.mkdir(parents=True, exist_ok=True)
    options = QUICK_OPTIONS if args.quick else []
    with tempfile.TemporaryDirectory(prefix="tfsim-determinism-runs-") as scratch:
        runs = measure(options, repeats, Path(scratch))
    payload = {
        "options": options,
        "quick": args.quick,
        "repeats": repeats,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "runs": runs,
    }
    (out / "determinism.json").write_text(json.dumps(payload, indent=2))
    report = render(payload)
    (out / "determinism.md").write_text(report + "\n")
    print(report)
    print(f"\nwrote determinism.json and determinism.md to {out}")


if __name__ == "__main__":
    main()
