"""SimCLR at a global batch of 1,024 over 8 replicas: LARS against Adam on glyphs.

The large-batch regime of the papers, on logical CPU devices: `tfsim pretrain
--algorithm simclr --replicas 8 --batch-size 1024` once with `--optimizer
lars` and once with `--optimizer adam`, each at its default learning rate
(LARS: 0.3 x batch / 256 = 1.2, warmed up over the first tenth of the steps;
Adam: 1e-3; both with cosine decay), the same epochs, seed 0, each in a fresh
process as `benchmark.glyphs.runs` does. Data: the embedded glyphs, whose
2,140 training images make 2 full batches of 1,024 per epoch (scikit-learn's
digits, about 1,440, would make one). The runs evaluate after their last epoch
only (`--eval-every` = epochs): at 2 steps an epoch, evaluating after each
would cost about as much as training.

Read from each run's `summary.json`, `history.json` and `run.json`: kNN and
linear-probe accuracy of held-out fonts (all 143 classes) of the raw pixels,
the untrained network and the trained one; the resolved learning rate; steps
and training seconds; the last epoch's loss and `proj_std`.

    python -m benchmark.glyphs.large_batch             # 80 epochs each; about 20 min on 2 cores
    python -m benchmark.glyphs.large_batch --epochs 10
    python -m benchmark.glyphs.large_batch --quick     # smoke run: 400 images, batch 64, 1 epoch

A full run writes `benchmark/results/large_batch.json` and `.md` after each
optimizer's run; a quick run writes to a new temporary folder (printed)
unless `--out` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from benchmark.common import markdown_table, output_folder, write_results
from benchmark.glyphs.runs import QUICK_OPTIONS, run_tfsim

OPTIMIZERS = ("lars", "adam")
REPLICAS = 8
BATCH_SIZE = 1024
QUICK_BATCH_SIZE = 64
# From a 3-epoch LARS calibration run on 2 shared cores (the results' note has its figures):
# as many epochs as let the pair fit in about 20 minutes.
EPOCHS = 80
FIGURES = tuple(
    f"{kind}_{when}" for kind in ("knn", "linear") for when in ("pixels", "before", "after")
)
RESULTS_NAME = "large_batch"
_TRAIN_IMAGES = re.compile(r"([\d,]+) train / [\d,]+ test images")


def pretrain(optimizer: str, options: list[str], batch_size: int, folder: Path) -> dict[str, Any]:
    """Runs one optimizer's `tfsim pretrain` in a fresh process; returns what the table shows."""
    arguments = ["pretrain", "--algorithm", "simclr", "--replicas", str(REPLICAS)]
    arguments += ["--batch-size", str(batch_size), "--optimizer", optimizer, *options]
    summary, stdout, wall = run_tfsim(arguments, 0, folder)
    epochs = json.loads((folder / "history.json").read_text())["epochs"]
    match = _TRAIN_IMAGES.search(stdout)
    return {
        "optimizer": optimizer,
        "learning_rate": json.loads((folder / "run.json").read_text())["resolved_learning_rate"],
        "train_images": int(match.group(1).replace(",", "")) if match else None,
        "epochs": len(epochs),
        # The timer counts steps x batch images an epoch.
        "steps": sum(round(e["images_per_second"] * e["seconds"] / batch_size) for e in epochs),
        "training_seconds": sum(e["seconds"] for e in epochs),
        "wall_seconds": wall,
        **{key: summary[key.replace("_", "_accuracy_")] for key in FIGURES},
        "loss": epochs[-1]["loss"],
        "proj_std": epochs[-1]["proj_std"],
    }


def _cell(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def render_markdown(payload: dict[str, Any]) -> str:
    """The markdown report of a results payload (`note`: how the runs were made, if said)."""
    header = ["optimizer", "learning rate", "epochs", "steps", "training s"]
    header += [
        f"{kind} {when}"
        for kind in ("kNN", "linear")
        for when in ("pixels", "untrained", "trained")
    ]
    header += ["final loss", "proj_std"]
    rows = [
        [
            run["optimizer"],
            f"{run['learning_rate']:g}",
            run["epochs"],
            run["steps"],
            f"{run['training_seconds']:.0f}",
            *(_cell(run[key]) for key in FIGURES),
            f"{run['loss']:.3f}",
            f"{run['proj_std']:.4f}",
        ]
        for run in payload["runs"]
    ]
    images = payload["runs"][0]["train_images"] if payload["runs"] else None
    data = payload["data"] + (f" ({images} training images)" if images else "")
    wall = sum(run["wall_seconds"] for run in payload["runs"]) / 60
    return "\n\n".join(
        [
            "# Large global batch: LARS against Adam",
            f"`tfsim pretrain --algorithm simclr --replicas {payload['replicas']} --batch-size "
            f"{payload['batch_size']} --optimizer O --epochs {payload['epochs']} --eval-every "
            f"{payload['epochs']} --seed 0` on "
            f"{data}, {payload['machine']} (logical CPU devices)"
            f"{' (--quick)' if payload['quick'] else ''}. Each optimizer at its default "
            "learning rate: LARS 0.3 x batch / 256, warmed up over the first tenth of the steps "
            "(momentum 0.9, weight decay 1e-6, trust coefficient 0.001, batch norm parameters "
            "and biases excluded); Adam 1e-3; cosine decay for both. Evaluated after the last "
            "epoch only (at 2 steps an epoch, evaluating after each would cost about as much as "
            "training). Training s: the epochs' seconds from `history.json`, first epoch (which "
            "also builds the graph) included. Accuracy of held-out fonts, all 143 classes: kNN "
            "(k=20) and a linear probe, on the raw pixels, the untrained network and the trained "
            "one (batch norm statistics recomputed, as the job does). Final loss and `proj_std` "
            "(about 1/sqrt(dim) when healthy, 0 when collapsed): the last epoch's. Wall time of "
            f"the runs, start to table: {wall:.0f} min."
            + (f" {payload['note']}" if payload.get("note") else ""),
            markdown_table(header, rows),
        ]
    )


def write(out: Path, payload: dict[str, Any]) -> str:
    """Writes the payload and its report to `out`; returns the report."""
    return write_results(out, RESULTS_NAME, payload, render_markdown)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 400 images, batch 64, 1 epoch"
    )
    parser.add_argument("--epochs", type=int, default=None, help=f"(default {EPOCHS}; quick: 1)")
    parser.add_argument("--note", default=None, help="how the runs were made, for the report")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs must be at least 1; got {args.epochs}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    epochs = 1 if args.quick and args.epochs is None else (args.epochs or EPOCHS)
    batch_size = QUICK_BATCH_SIZE if args.quick else BATCH_SIZE
    options = ["--epochs", str(epochs), "--eval-every", str(epochs)]
    if args.quick:
        # QUICK_OPTIONS' own --epochs 1 comes first, so ours wins.
        options = [*QUICK_OPTIONS, *options]
    out = output_folder(args.out, args.quick, RESULTS_NAME)
    out.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {
        "quick": args.quick,
        "data": "glyphs" + (" (--limit 400)" if args.quick else ""),
        "replicas": REPLICAS,
        "batch_size": batch_size,
        "epochs": epochs,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "note": args.note,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="tfsim-large-batch-") as scratch:
        for optimizer in OPTIMIZERS:
            run = pretrain(optimizer, options, batch_size, Path(scratch) / optimizer)
            print(f"{optimizer}: {run}", flush=True)
            payload["runs"].append(run)
            write(out, payload)
    print(write(out, payload))
    print(f"\nwrote {RESULTS_NAME}.json and {RESULTS_NAME}.md to {out}")


if __name__ == "__main__":
    main()
