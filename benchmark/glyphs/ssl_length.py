"""How the self-supervised job's kNN accuracy on glyphs grows with the length of the run.

Runs the self-supervised default (`tfsim train`: SimCLR, Adam 1e-3 with
cosine decay over the run, batch 128, `GlyphAugmenter` views) for each
number of epochs and seed, each in a fresh process, and reads its
`summary.json` and `history.json`: kNN accuracy of held-out fonts of all
143 classes before (the network as built), after (batch norm statistics
recomputed from the training images, as the job does), of the raw pixels,
and the training time. Each length is its own run (the cosine schedule
spans the run), so the figure at 15 epochs is that of a run of 15 epochs.

    python -m benchmark.glyphs.ssl_length                     # 5, 15, 45 epochs x seeds 0-2
    python -m benchmark.glyphs.ssl_length --epochs 5 15 --seeds 0 1 2
    python -m benchmark.glyphs.ssl_length --quick             # smoke run: 400 images

A full run writes `benchmark/results/glyphs_ssl_length.json` and `.md`,
adding to the runs already there (a run of the same epochs and seed is
replaced), so the lengths can be run on different days; a quick run writes
to a new temporary folder (printed) unless `--out` is given.
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
from pathlib import Path
from statistics import mean, stdev
from typing import Any

from benchmark.common import markdown_table, output_folder

QUICK_OPTIONS = ["--limit", "400"]


def run_once(epochs: int, seed: int, options: list[str], folder: Path) -> dict[str, Any]:
    """Runs one self-supervised run in a fresh process; returns its figures."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    command = [sys.executable, "-m", "tensorflow_similarity", "train", *options]
    command += ["--epochs", str(epochs), "--seed", str(seed), "--output", str(folder)]
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    summary = json.loads((folder / "summary.json").read_text())
    history = json.loads((folder / "history.json").read_text())
    return {
        "epochs": epochs,
        "seed": seed,
        "knn_pixels": summary["knn_accuracy_pixels"],
        "knn_before": summary["knn_accuracy_before"],
        "knn_after": summary["knn_accuracy_after"],
        "knn_by_epoch": [record["knn_accuracy"] for record in history["epochs"]],
        "seconds_by_epoch": [record["seconds"] for record in history["epochs"]],
        "training_seconds": sum(record["seconds"] for record in history["epochs"]),
        "wall_seconds": seconds,
    }


def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{mean(values):.3f} ± {stdev(values):.3f}"


def render_markdown(payload: dict[str, Any]) -> str:
    """The markdown report of a results payload."""
    runs = payload["runs"]
    rows = [
        [
            run["epochs"],
            run["seed"],
            f"{run['knn_pixels']:.3f}",
            f"{run['knn_before']:.3f}",
            f"{run['knn_after']:.3f}",
            f"{run['knn_after'] - run['knn_before']:+.3f}",
            f"{run['knn_after'] - run['knn_pixels']:+.3f}",
            f"{run['training_seconds'] / 60:.1f}",
            f"{run['wall_seconds'] / 60:.1f}",
        ]
        for run in sorted(runs, key=lambda r: (r["epochs"], r["seed"]))
    ]
    summary_rows = []
    for epochs in sorted({run["epochs"] for run in runs}):
        group = [run for run in runs if run["epochs"] == epochs]
        gains = [run["knn_after"] - run["knn_before"] for run in group]
        summary_rows.append(
            [
                epochs,
                ", ".join(str(run["seed"]) for run in group),
                _spread([run["knn_after"] for run in group]),
                _spread(gains),
                f"{sum(gain > 0 for gain in gains)} of {len(gains)}",
                _spread([run["knn_after"] - run["knn_pixels"] for run in group]),
                f"{mean(run['wall_seconds'] for run in group) / 60:.1f}",
            ]
        )
    curve_rows = []
    marks = (1, 5, 15, 30, 45, 90)
    for run in sorted(runs, key=lambda r: (r["epochs"], r["seed"])):
        if run["epochs"] < 5 or "seconds_by_epoch" not in run:
            continue
        cells = []
        for mark in [m for m in marks if m <= run["epochs"]]:
            minutes = sum(run["seconds_by_epoch"][:mark]) / 60
            knn = run["knn_by_epoch"][mark - 1]
            cells.append(f"{mark}: {knn:.3f} ({knn - run['knn_before']:+.3f}, {minutes:.0f} min)")
        curve_rows.append(
            [run["epochs"], run["seed"], f"{run['knn_before']:.3f}", "; ".join(cells)]
        )
    curve = []
    if curve_rows:
        curve = [
            "Within a run: kNN accuracy after epoch N of the run (batch norm statistics "
            "recomputed at each epoch's end, as the job does), its difference from the "
            "untrained network, and the training minutes up to that epoch. The learning rate's "
            "cosine schedule spans the whole run, so epoch 15 of a 45-epoch run is not a "
            "15-epoch run.",
            markdown_table(
                ["epochs", "seed", "untrained", "epoch: trained (gain, minutes)"], curve_rows
            ),
        ]
    return "\n\n".join(
        [
            "# Self-supervised default on glyphs: kNN accuracy by length of run",
            f"`tfsim train --epochs E` on {payload['machine']}"
            f"{' (--quick)' if payload['quick'] else ''}. kNN accuracy (k=20) of held-out "
            "fonts, all 143 classes: `untrained` is the network as built; `trained` is "
            "after the run, with batch norm statistics recomputed from the training images "
            "(as the job does); `pixels` searches the raw images. Minutes: training only "
            "(the epochs' time) and wall time from start to the table, on a machine that may "
            "have been running other work (compare lengths, not machines)."
            + (f" {payload['note']}" if payload.get("note") else ""),
            markdown_table(
                [
                    "epochs",
                    "seeds",
                    "trained",
                    "trained - untrained",
                    "gains",
                    "trained - pixels",
                    "wall minutes",
                ],
                summary_rows,
            ),
            "Mean ± sample standard deviation over seeds. Each run:",
            markdown_table(
                [
                    "epochs",
                    "seed",
                    "pixels",
                    "untrained",
                    "trained",
                    "trained - untrained",
                    "trained - pixels",
                    "training minutes",
                    "wall minutes",
                ],
                rows,
            ),
            *curve,
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 400 images, 1 epoch")
    parser.add_argument("--epochs", type=int, nargs="+", default=None, help="(5 15 45; quick: 1)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="(0 1 2; quick: 0)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    lengths = args.epochs or ([1] if args.quick else [5, 15, 45])
    out = output_folder(args.out, args.quick, "glyphs_ssl_length")
    out.mkdir(parents=True, exist_ok=True)
    results = out / "glyphs_ssl_length.json"
    runs: list[dict[str, Any]] = []
    if results.is_file() and not args.quick:
        runs = json.loads(results.read_text())["runs"]
    payload = {
        "quick": args.quick,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "runs": runs,
    }
    with tempfile.TemporaryDirectory(prefix="tfsim-glyphs-ssl-length-") as scratch:
        for epochs in lengths:
            for seed in seeds:
                run = run_once(
                    epochs,
                    seed,
                    QUICK_OPTIONS if args.quick else [],
                    Path(scratch) / f"{epochs}-{seed}",
                )
                print(f"{epochs} epochs, seed {seed}: {run}", flush=True)
                runs[:] = [r for r in runs if (r["epochs"], r["seed"]) != (epochs, seed)]
                runs.append(run)
                # Written after every run: a long sweep interrupted keeps what it measured.
                results.write_text(json.dumps(payload, indent=2))
                (out / "glyphs_ssl_length.md").write_text(render_markdown(payload) + "\n")
    print(render_markdown(payload))
    print(f"\nwrote glyphs_ssl_length.json and glyphs_ssl_length.md to {out}")


if __name__ == "__main__":
    main()
