"""Both `tfsim train` jobs' default runs on glyphs: before, after, and the raw pixels.

Runs the supervised default (`tfsim train --algorithm multisimilarity`) and
the self-supervised default (`tfsim train`) on the embedded glyphs for each
seed, each in a fresh process, and reads every run's `summary.json`: the
untrained network's figures, the trained network's, the raw pixels' (the
reference a network should beat) and the wall time from start to the
table. Supervised: recall@1 of held-out fonts of the 81 unseen (Greek and
Cyrillic) classes and of the 62 seen ones. Self-supervised: the kNN
accuracy of held-out fonts of all 143 classes.

    python -m benchmark.glyphs.runs                # seeds 0-2, both jobs; about 20 min on 2 cores
    python -m benchmark.glyphs.runs --jobs supervised --seeds 0
    python -m benchmark.glyphs.runs --quick        # smoke run: 400 images, 1 epoch, seed 0

A full run writes `benchmark/results/glyphs_runs.json` and `.md`; a quick run
writes to a new temporary folder (printed) unless `--out` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from benchmark.common import markdown_table, output_folder, write_results

JOBS = {"supervised": ["--algorithm", "multisimilarity"], "self-supervised": []}
QUICK_OPTIONS = ["--limit", "400", "--epochs", "1"]
# Supervised quick runs: few classes, so that 400 images still fill class-balanced batches.
QUICK_SUPERVISED = ["--train-classes", "20", "--classes-per-batch", "4", "--batch-size", "16"]


def seeds_parser(description: str) -> argparse.ArgumentParser:
    """A parser with the glyph benchmarks' `--quick` and `--seeds`; see `chosen_seeds`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="smoke run: 400 images, 1 epoch")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="(0 1 2; quick: 0)")
    return parser


def chosen_seeds(args: argparse.Namespace) -> list[int]:
    """`--seeds` if given, else 0, 1 and 2 (a quick run: 0)."""
    return args.seeds or ([0] if args.quick else [0, 1, 2])


def payload_head(quick: bool, seeds: list[int]) -> dict[str, Any]:
    """The first keys of a glyph benchmark's results: how it ran, where and when."""
    return {
        "quick": quick,
        "seeds": seeds,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }


class TfsimRun(NamedTuple):
    """A finished `tfsim` run: its `summary.json`, what it printed and its wall time."""

    summary: dict[str, Any]
    stdout: str
    seconds: float


def run_tfsim(arguments: Sequence[str], seed: int, folder: Path) -> TfsimRun:
    """Runs `tfsim <arguments> --seed <seed> --output <folder>` in a fresh process.

    Raises:
        RuntimeError: If the run fails; the message ends with its stderr.
    """
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "tensorflow_similarity", *arguments]
    command += ["--seed", str(seed), "--output", str(folder)]
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    summary = json.loads((folder / "summary.json").read_text())
    return TfsimRun(summary, result.stdout, seconds)


def run_once(job: str, seed: int, options: list[str], folder: Path) -> dict[str, Any]:
    """Runs one job's run in a fresh process; returns its figures and wall time."""
    summary, _, seconds = run_tfsim(["train", *JOBS[job], *options], seed, folder)
    if job == "supervised":
        figures = {
            f"{group}_{when}": source[f"recall_at_1_{group}"]
            for group in ("unseen", "seen")
            for when, source in (
                ("pixels", summary["pixels"]),
                ("before", summary["before"]),
                ("after", summary["after"]),
            )
        }
    else:
        figures = {
            f"knn_{when}": summary[f"knn_accuracy_{when}"] for when in ("pixels", "before", "after")
        }
    return {"seed": seed, "seconds": seconds, **figures}


def _seconds(run: dict[str, Any]) -> str:
    return "-" if run["seconds"] is None else f"{run['seconds']:.0f}"


def render_markdown(payload: dict[str, Any]) -> str:
    """The markdown report of a results payload (`note`: how the runs were made, if said)."""
    parts = [
        "# Both jobs' default runs on glyphs",
        f"`tfsim train` on {payload['machine']}, seeds {payload['seeds']}"
        f"{' (--quick)' if payload['quick'] else ''}; wall time from start to the table."
        + (f" {payload['note']}" if payload.get("note") else ""),
    ]
    supervised = payload["runs"].get("supervised")
    if supervised:
        rows = [
            [
                run["seed"],
                f"{run['unseen_pixels']:.3f}",
                f"{run['unseen_before']:.3f}",
                f"{run['unseen_after']:.3f}",
                f"{run['unseen_after'] - run['unseen_pixels']:+.3f}",
                f"{run['seen_pixels']:.3f} / {run['seen_before']:.3f} / {run['seen_after']:.3f}",
                _seconds(run),
            ]
            for run in supervised
        ]
        parts += [
            "## Supervised (`--algorithm multisimilarity`): recall@1 of held-out fonts",
            markdown_table(
                [
                    "seed",
                    "unseen: pixels",
                    "untrained",
                    "trained",
                    "trained - pixels",
                    "seen: pixels / untrained / trained",
                    "seconds",
                ],
                rows,
            ),
        ]
    ssl = payload["runs"].get("self-supervised")
    if ssl:
        rows = [
            [
                run["seed"],
                f"{run['knn_pixels']:.3f}",
                f"{run['knn_before']:.3f}",
                f"{run['knn_after']:.3f}",
                f"{run['knn_after'] - run['knn_before']:+.3f}",
                _seconds(run),
            ]
            for run in ssl
        ]
        parts += [
            "## Self-supervised (the default algorithm): kNN accuracy of held-out fonts",
            markdown_table(
                ["seed", "pixels", "untrained", "trained", "trained - untrained", "seconds"],
                rows,
            ),
        ]
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = seeds_parser(__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", choices=tuple(JOBS), default=list(JOBS))
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    seeds = chosen_seeds(args)
    out = output_folder(args.out, args.quick, "glyphs_runs")
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="tfsim-glyphs-runs-") as scratch:
        for job in args.jobs:
            options = [*QUICK_OPTIONS, *(QUICK_SUPERVISED if job == "supervised" else [])]
            for seed in seeds:
                run = run_once(
                    job, seed, options if args.quick else [], Path(scratch) / f"{job}-{seed}"
                )
                print(f"{job}, seed {seed}: {run}", flush=True)
                runs.setdefault(job, []).append(run)
    payload = {
        **payload_head(args.quick, seeds),
        "runs": runs,
    }
    print(write_results(out, "glyphs_runs", payload, render_markdown))
    print(f"\nwrote glyphs_runs.json and glyphs_runs.md to {out}")


if __name__ == "__main__":
    main()
