"""Momentum teachers (BYOL, MoCo v3, DINO) beside SimCLR on glyphs, for the same training time.

Runs `tfsim pretrain --algorithm A` on the embedded glyphs for each method
and seed, each in a fresh process as `benchmark.glyphs.runs` does, and reads
every run's `summary.json` and `history.json`: kNN and linear-probe accuracy
of held-out fonts (all 143 classes) of the raw pixels, the untrained network
and the trained one, the training time, and the last epoch's collapse
monitors (`proj_std`, `pred_std` where the method has a predictor,
`teacher_entropy` for DINO).

The budget is wall time, not epochs. SimCLR runs the job's default length;
its budget is its epochs times its steady seconds per epoch (`summary.json`'s
`seconds_per_epoch`: the epochs after the first, which also builds the
graph), averaged over the seeds. Each teacher method first runs a calibration
of two epochs on the first seed; its second epoch's seconds give it
`round(budget / seconds)` epochs (at least 1) for every seed.

    python -m benchmark.glyphs.teachers                  # seeds 0-2; about 50 min on 2 cores
    python -m benchmark.glyphs.teachers --methods simclr dino --seeds 0
    python -m benchmark.glyphs.teachers --quick          # smoke run: 400 images, 1 epoch, seed 0

A quick run gives every method one epoch (no calibration). A full run writes
`benchmark/results/glyphs_teachers.json` and `.md` after every run, so an
interrupted one keeps what it measured; a quick run writes to a new temporary
folder (printed) unless `--out` is given.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from statistics import mean
from typing import Any

from benchmark.common import markdown_table, output_folder, write_results
from benchmark.glyphs.runs import (
    QUICK_OPTIONS,
    chosen_seeds,
    payload_head,
    run_tfsim,
    seeds_parser,
)

METHODS = ("simclr", "byol", "mocov3", "dino")
FIGURES = tuple(
    f"{kind}_{when}" for kind in ("knn", "linear") for when in ("pixels", "before", "after")
)
MONITORS = ("proj_std", "pred_std", "teacher_entropy")
CALIBRATION_EPOCHS = 2
RESULTS_NAME = "glyphs_teachers"


def pretrain(method: str, seed: int, options: list[str], folder: Path) -> dict[str, Any]:
    """Runs `tfsim pretrain` in a fresh process; returns its figures, time and monitors."""
    summary, _, wall = run_tfsim(["pretrain", "--algorithm", method, *options], seed, folder)
    epochs = json.loads((folder / "history.json").read_text())["epochs"]
    return {
        "method": method,
        "seed": seed,
        "epochs": len(epochs),
        "training_seconds": sum(record["seconds"] for record in epochs),
        "seconds_per_epoch": summary["seconds_per_epoch"],
        "wall_seconds": wall,
        **{key: summary[f"{key.split('_')[0]}_accuracy_{key.split('_')[1]}"] for key in FIGURES},
        **{key: epochs[-1].get(key) for key in MONITORS},
    }


def epochs_for_budget(budget_seconds: float, seconds_per_epoch: float) -> int:
    """The number of epochs of `seconds_per_epoch` closest to `budget_seconds`, at least 1."""
    return max(1, round(budget_seconds / seconds_per_epoch))


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _mean(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [run[key] for run in runs if run.get(key) is not None]
    return mean(values) if values else None


def render_markdown(payload: dict[str, Any]) -> str:
    """The markdown report of a results payload (`note`: how the runs were made, if said)."""
    budget = payload["budget"]
    if payload["quick"]:
        scheme = "Quick run: every method one epoch, no calibration."
    elif budget is None:
        scheme = "SimCLR's runs so far; the budget comes after its last seed."
    else:
        calibration = ", ".join(
            f"{method} {seconds:.2f} s -> {budget['epochs'][method]} epochs"
            for method, seconds in budget["calibration_seconds_per_epoch"].items()
        )
        scheme = (
            f"Same training time for every method: SimCLR's default {budget['simclr_epochs']} "
            f"epochs at its steady {budget['simclr_seconds_per_epoch']:.2f} s per epoch (mean "
            f"over seeds, first epoch left out: it also builds the graph) make a budget of "
            f"{budget['seconds']:.0f} s; each teacher method's epochs are that budget over the "
            f"seconds of the second epoch of a {CALIBRATION_EPOCHS}-epoch calibration run on "
            f"seed {payload['seeds'][0]}, rounded: {calibration}."
        )
    header = ["method", "seed", "epochs", "training s"]
    header += [
        f"{kind} {when}"
        for kind in ("kNN", "linear")
        for when in ("pixels", "untrained", "trained")
    ]
    header += list(MONITORS)

    def row(method: str, seed: str, runs: list[dict[str, Any]]) -> list[str]:
        return [
            method,
            seed,
            f"{_mean(runs, 'epochs'):.0f}",
            f"{_mean(runs, 'training_seconds'):.0f}",
            *(_cell(_mean(runs, key)) for key in FIGURES),
            *(_cell(_mean(runs, key), 4) for key in MONITORS),
        ]

    rows = []
    for method, runs in payload["runs"].items():
        rows += [row(method, str(run["seed"]), [run]) for run in runs]
        if len(runs) > 1:
            rows.append(row(f"**{method}**", "mean", runs))
    return "\n\n".join(
        [
            "# Momentum teachers beside SimCLR on glyphs",
            f"`tfsim pretrain --algorithm A` on {payload['machine']}, seeds {payload['seeds']}"
            f"{' (--quick)' if payload['quick'] else ''}. {scheme} Training s: the epochs' "
            "seconds from `history.json`, first epoch included. Accuracy of held-out fonts, all "
            "143 classes: kNN (k=20) and a linear probe, on the raw pixels, the untrained network "
            "and the trained one (batch norm statistics recomputed, as the job does). Collapse "
            "monitors of the last epoch: `proj_std` (about 1/sqrt(dim) when healthy, 0 when "
            "collapsed), `pred_std` (the predictor's, where there is one), `teacher_entropy` "
            "(DINO: 0 when the teacher collapses to one prototype, ln K when to uniform; "
            "K = --projector-dim, 512 by default: ln 512 = 6.24)."
            + (f" {payload['note']}" if payload.get("note") else ""),
            markdown_table(header, rows),
        ]
    )


def write(out: Path, payload: dict[str, Any]) -> str:
    """Writes the payload and its report to `out`; returns the report."""
    return write_results(out, RESULTS_NAME, payload, render_markdown)


def main(argv: list[str] | None = None) -> None:
    parser = seeds_parser(__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--note", default=None, help="how the runs were made, for the report")
    parser.add_argument("--out", type=Path, default=None, help="folder for the results")
    args = parser.parse_args(argv)
    if not args.quick and args.methods[0] != "simclr":
        parser.error("a full run starts with simclr: its time is the others' budget")
    seeds = chosen_seeds(args)
    out = output_folder(args.out, args.quick, RESULTS_NAME)
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    budget: dict[str, Any] | None = None
    payload = {
        **payload_head(args.quick, seeds),
        "budget": budget,
        "note": args.note,
        "runs": runs,
    }
    with tempfile.TemporaryDirectory(prefix="tfsim-glyphs-teachers-") as scratch:
        for method in args.methods:
            options = QUICK_OPTIONS if args.quick else []
            if budget is not None:
                calibration = pretrain(
                    method,
                    seeds[0],
                    ["--epochs", str(CALIBRATION_EPOCHS)],
                    Path(scratch) / f"{method}-calibration",
                )
                seconds = calibration["seconds_per_epoch"]
                budget["calibration_seconds_per_epoch"][method] = seconds
                budget["epochs"][method] = epochs_for_budget(budget["seconds"], seconds)
                options = ["--epochs", str(budget["epochs"][method])]
            for seed in seeds:
                run = pretrain(method, seed, options, Path(scratch) / f"{method}-{seed}")
                print(f"{method}, seed {seed}: {run}", flush=True)
                runs.setdefault(method, []).append(run)
                write(out, payload)
            if method == "simclr" and not args.quick:
                per_epoch = mean(run["seconds_per_epoch"] for run in runs[method])
                epochs = runs[method][0]["epochs"]
                budget = {
                    "simclr_epochs": epochs,
                    "simclr_seconds_per_epoch": per_epoch,
                    "seconds": epochs * per_epoch,
                    "calibration_seconds_per_epoch": {},
                    "epochs": {},
                }
                payload["budget"] = budget
    print(write(out, payload))
    print(f"\nwrote {RESULTS_NAME}.json and {RESULTS_NAME}.md to {out}")


if __name__ == "__main__":
    main()
