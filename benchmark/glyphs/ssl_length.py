"""How the self-supervised job's kNN accuracy on glyphs grows with the width and length of a run.

Runs the self-supervised job (`tfsim train`: SimCLR, Adam 1e-3 with cosine
decay over the run, batch 128, `GlyphAugmenter` views) for each ResNet-18
width, number of epochs and seed, each in a fresh process, and reads its
`run.json`, `summary.json` and `history.json`: kNN accuracy of held-out
fonts of all 143 classes before (the network as built), after (batch norm
statistics recomputed from the training images, as the job does), of the
raw pixels, and the training time. Each length is its own run (the cosine
schedule spans the run), so the figure at 15 epochs is that of a run of 15
epochs.

    python -m benchmark.glyphs.ssl_length                     # the default width: 30, 150 epochs
    python -m benchmark.glyphs.ssl_length --width 1 --epochs 5 15 45 --seeds 0 1 2
    python -m benchmark.glyphs.ssl_length --epochs 150 --eval-every 10
    python -m benchmark.glyphs.ssl_length --quick             # smoke run: 400 images

A full run writes `benchmark/results/glyphs_ssl_length.json` and `.md`,
adding to the runs already there (a run of the same width, epochs and seed
is replaced), so the settings can be run on different days; a quick run
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
    run_options = json.loads((folder / "run.json").read_text())["options"]
    summary = json.loads((folder / "summary.json").read_text())
    history = json.loads((folder / "history.json").read_text())
    return {
        "width": run_options["width"],
        "epochs": epochs,
        "seed": seed,
        "knn_pixels": summary["knn_accuracy_pixels"],
        "knn_before": summary["knn_accuracy_before"],
        "knn_after": summary["knn_accuracy_after"],
        # None for an epoch left out by --eval-every.
        "knn_by_epoch": [record.get("knn_accuracy") for record in history["epochs"]],
        "seconds_by_epoch": [record["seconds"] for record in history["epochs"]],
        "training_seconds": sum(record["seconds"] for record in history["epochs"]),
        "wall_seconds": seconds,
    }


def _spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{mean(values):.3f} ± {stdev(values):.3f}"


def _setting(run: dict[str, Any]) -> tuple[float, int]:
    return run["width"], run["epochs"]


def render_markdown(payload: dict[str, Any]) -> str:
    """The markdown report of a results payload."""
    runs = sorted(payload["runs"], key=lambda r: (*_setting(r), r["seed"]))
    rows = [
        [
            f"{run['width']:g}",
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
        for run in runs
    ]
    summary_rows = []
    for setting in sorted({_setting(run) for run in runs}):
        group = [run for run in runs if _setting(run) == setting]
        gains = [run["knn_after"] - run["knn_before"] for run in group]
        summary_rows.append(
            [
                f"{setting[0]:g}",
                setting[1],
                ", ".join(str(run["seed"]) for run in group),
                _spread([run["knn_after"] for run in group]),
                _spread(gains),
                f"{sum(gain > 0 for gain in gains)} of {len(gains)}",
                _spread([run["knn_after"] - run["knn_pixels"] for run in group]),
                f"{mean(run['training_seconds'] for run in group) / 60:.1f}",
                f"{mean(run['wall_seconds'] for run in group) / 60:.1f}",
            ]
        )
    curve_rows = []
    marks = (1, 5, 10, 15, 30, 45, 90, 150)
    for run in runs:
        if run["epochs"] < 5 or "seconds_by_epoch" not in run:
            continue
        cells = []
        for mark in [m for m in marks if m <= run["epochs"]]:
            knn = run["knn_by_epoch"][mark - 1]
            if knn is None:  # not evaluated (--eval-every)
                continue
            minutes = sum(run["seconds_by_epoch"][:mark]) / 60
            cells.append(f"{mark}: {knn:.3f} ({knn - run['knn_before']:+.3f}, {minutes:.0f} min)")
        curve_rows.append(
            [
                f"{run['width']:g}",
                run["epochs"],
                run["seed"],
                f"{run['knn_before']:.3f}",
                "; ".join(cells),
            ]
        )
    curve = []
    if curve_rows:
        curve = [
            "Within a run: kNN accuracy after epoch N of the run (batch norm statistics "
            "recomputed at each evaluation, as the job does), its difference from the "
            "untrained network, and the training minutes up to that epoch. The learning rate's "
            "cosine schedule spans the whole run, so epoch 15 of a 45-epoch run is not a "
            "15-epoch run.",
            markdown_table(
                ["width", "epochs", "seed", "untrained", "epoch: trained (gain, minutes)"],
                curve_rows,
            ),
        ]
    return "\n\n".join(
        [
            "# Self-supervised job on glyphs: kNN accuracy by width and length of run",
            f"`tfsim train --width W --epochs E` on {payload['machine']}"
            f"{' (--quick)' if payload['quick'] else ''}. Width multiplies the ResNet-18's "
            "filters (1: 64 to 512; 0.25, the default on glyphs: 16 to 128); each width has "
            "its own untrained network. kNN accuracy (k=20) of held-out fonts, all 143 "
            "classes: `untrained` is the network as built; `trained` is after the run, with "
            "batch norm statistics recomputed from the training images (as the job does); "
            "`pixels` searches the raw images. Minutes: training only (the epochs' time) and "
            "wall time from start to the table, on a machine that may have been running other "
            "work (compare settings, not machines)."
            + (f" {payload['note']}" if payload.get("note") else ""),
            markdown_table(
                [
                    "width",
                    "epochs",
                    "seeds",
                    "trained",
                    "trained - untrained",
                    "gains",
                    "trained - pixels",
                    "training minutes",
                    "wall minutes",
                ],
                summary_rows,
            ),
            "Mean ± sample standard deviation over seeds. Each run:",
            markdown_table(
                [
                    "width",
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
    parser.add_argument("--epochs", type=int, nargs="+", default=None, help="(30 150; quick: 1)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="(0 1 2; quick: 0)")
    parser.add_argument("--width", type=float, default=None, help="(the job's default)")
    parser.add_argument("--eval-every", type=int, default=None, help="(the job's default)")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    lengths = args.epochs or ([1] if args.quick else [30, 150])
    options = QUICK_OPTIONS if args.quick else []
    if args.width is not None:
        options = [*options, "--width", str(args.width)]
    if args.eval_every is not None:
        options = [*options, "--eval-every", str(args.eval_every)]
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
                run = run_once(epochs, seed, options, Path(scratch) / f"{epochs}-{seed}")
                print(f"width {run['width']:g}, {epochs} epochs, seed {seed}: {run}", flush=True)
                key = (*_setting(run), seed)
                runs[:] = [r for r in runs if (*_setting(r), r["seed"]) != key]
                runs.append(run)
                # Written after every run: a long sweep interrupted keeps what it measured.
                results.write_text(json.dumps(payload, indent=2))
                (out / "glyphs_ssl_length.md").write_text(render_markdown(payload) + "\n")
    print(render_markdown(payload))
    print(f"\nwrote glyphs_ssl_length.json and glyphs_ssl_length.md to {out}")


if __name__ == "__main__":
    main()
