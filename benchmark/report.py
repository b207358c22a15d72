"""Assembles `benchmark/results/REPORT.md` and its plots from the benchmarks' JSON results.

Reads whichever of these exist in `--results` (default `benchmark/results`):

* `ssl_quality.json` (`benchmark.self_supervised.quality`): kNN accuracy with
  per-replica batch norm, synchronised batch norm and one device;
* `ssl_small_batch.json` (`benchmark.self_supervised.small_batch`): the same at
  2 and 4 images per replica, with a plot of the paired differences;
* `metric_small_batch.json` (`benchmark.metric.small_batch`): a metric loss
  at 2 and 4 images per replica, per-replica vs global mining and batch norm,
  with a plot of the paired differences (`metric_small_batch.png`);
* `sync_bn.json` and `sync_bn_gpu.json` (`benchmark.sync_bn`): collectives,
  step-time overhead, robustness, and whatever further sections that benchmark
  wrote (its own `render_markdown` renders the tables);
* the results in `SCRIPT_SECTIONS` below (the glyphs runs, architecture
  builders, search backends, metric losses), each rendered by its benchmark's
  `render_markdown`.

and writes `REPORT.md` and PNG plots (`ssl_quality.png`, `sync_bn_overhead.png`,
`sync_bn_bytes.png`, and their `_gpu` twins) next to them. Every number in the report, the
conclusions included, is computed here from those files; none is typed by
hand. The machine, date and command of each result come from the JSON.

Usage (from the repository root):

    python -m benchmark.self_supervised.quality && python -m benchmark.sync_bn && \\
        python -m benchmark.architectures && python -m benchmark.report
    python -m benchmark.report --results /tmp/out     # report on results elsewhere,
                                                      # e.g. the folder a --quick run printed
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmark.common import (  # noqa: E402
    REPO_ROOT,
    REPORT_COMMAND,
    RESULTS_DIR,
    command_line,
    markdown_table,
    render_tables,
)
from benchmark.metric import small_batch_tables  # noqa: E402
from benchmark.self_supervised import quality_tables  # noqa: E402
from benchmark.self_supervised.quality_tables import ALGORITHM_LABELS, SETTINGS  # noqa: E402
from benchmark.sync_bn.report import (  # noqa: E402
    plot_batch_norm_bytes,
    plot_overhead,
    sync_bn_section,
)

SETTING_STYLE = {
    "per_replica": ("(a) per-replica BN, 4 replicas", "tab:red", "o"),
    "sync": ("(b) synchronised BN, 4 replicas", "tab:blue", "s"),
    "single": ("(c) one device, global batch", "tab:gray", "^"),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Write REPORT.md and PNG plots from the benchmarks' JSON results."
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS_DIR,
        help="Folder holding the JSON results (default: benchmark/results).",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="Folder for REPORT.md and the plots (default: the --results folder).",
    )
    return parser.parse_args(argv)


def load_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    return json.loads(path.read_text())


def points(value: float) -> str:
    """A difference of accuracies (fractions) in percentage points."""
    return f"{100 * value:.1f}"


# --------------------------------------------------------------------------------------
# Self-supervised quality.
# --------------------------------------------------------------------------------------


def plot_ssl_quality(report: dict[str, Any], path: Path) -> None:
    """kNN accuracy vs per-replica batch, one panel per algorithm, error bars = seed std."""
    config = report["meta"]["config"]
    algorithms = config["algorithms"]
    batches = config["batch_sizes"]
    summary = {(r["algorithm"], r["batch_per_replica"], r["setting"]): r for r in report["summary"]}
    figure, axes = plt.subplots(
        1, len(algorithms), figsize=(4.2 * len(algorithms), 3.6), sharey=True, squeeze=False
    )
    for axis, algorithm in zip(axes[0], algorithms, strict=True):
        for offset, setting in zip((-0.06, 0.0, 0.06), SETTINGS, strict=True):
            label, color, marker = SETTING_STYLE[setting]
            rows = [summary.get((algorithm, b, setting)) for b in batches]
            xs = [b * 2**offset for b, r in zip(batches, rows, strict=True) if r]
            axis.errorbar(
                xs,
                [100 * r["mean"] for r in rows if r],
                yerr=[100 * r["std"] for r in rows if r],
                label=label,
                color=color,
                marker=marker,
                capsize=4,
                linewidth=1.5,
            )
        axis.set_xscale("log", base=2)
        axis.set_xlim(min(batches) / 1.6, max(batches) * 1.6)
        axis.set_xticks(batches, [str(b) for b in batches])
        axis.minorticks_off()
        axis.set_xlabel("images per replica (global batch = 4x)")
        axis.set_title(algorithm_label(algorithm))
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("kNN top-1 accuracy (%)")
    axes[0][-1].legend(fontsize=8, loc="best")
    n = max(r["n"] for r in report["summary"])
    figure.suptitle(f"Test kNN accuracy, mean ± std over {n} seed(s)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def algorithm_label(algorithm: str) -> str:
    return ALGORITHM_LABELS.get(algorithm, algorithm)


def ssl_conclusion(report: dict[str, Any]) -> str:
    """Plain-language findings, each computed from the summary rows.

    "Within the seed spread" means |mean(x) - mean(c)| is at most the larger
    of the two cells' standard deviations over seeds.
    """
    config = report["meta"]["config"]
    summary = {(r["algorithm"], r["batch_per_replica"], r["setting"]): r for r in report["summary"]}
    cells = [
        (a, b)
        for a in config["algorithms"]
        for b in config["batch_sizes"]
        if all((a, b, s) in summary for s in SETTINGS)
    ]
    if not cells:
        return "No complete (a)/(b)/(c) cell: nothing to compare.\n"

    def gap(setting: str, algorithm: str, batch: int) -> tuple[float, float, bool]:
        row, single = summary[algorithm, batch, setting], summary[algorithm, batch, "single"]
        difference = row["mean"] - single["mean"]
        spread = max(row["std"], single["std"])
        return difference, spread, abs(difference) <= spread

    sentences = []
    if config.get("quick"):
        sentences.append(
            "This is a `--quick` run (one epoch on a subset): it shows that the pipeline "
            "works, and its accuracies say nothing about the methods."
        )
    if paired := paired_runs_sentence(report):
        sentences.append(paired)
    if max(summary[cell + ("single",)]["n"] for cell in cells) < 2:
        differences = "; ".join(
            f"{algorithm_label(a)}, {b} images per replica: (a) - (c) "
            f"{points(summary[a, b, 'per_replica']['mean'] - summary[a, b, 'single']['mean'])}, "
            f"(b) - (c) {points(summary[a, b, 'sync']['mean'] - summary[a, b, 'single']['mean'])}"
            for a, b in cells
        )
        sentences.append(
            f"One seed only, so there is no spread to judge differences against: {differences} "
            "points."
        )
        sentences.append(baseline_sentence(report))
        return "\n\n".join(sentences) + "\n"
    sync_gaps = {cell: gap("sync", *cell) for cell in cells}
    within = sum(inside for _, _, inside in sync_gaps.values())
    worst_cell, (worst, worst_spread, _) = max(sync_gaps.items(), key=lambda kv: abs(kv[1][0]))
    sentences.append(
        f"Synchronised batch norm (b) is within the seed spread of one device (c) in {within} "
        f"of {len(cells)} algorithm/batch cells; the largest difference of means is "
        f"{points(worst)} points ({algorithm_label(worst_cell[0])}, {worst_cell[1]} images per "
        f"replica, seed spread {points(worst_spread)})."
    )
    paired = [
        abs(summary[a, b, "sync"]["diff_vs_single_mean"])
        for a, b in cells
        if "diff_vs_single_mean" in summary[a, b, "sync"]
    ]
    if paired:
        sentences.append(
            "Paired by seed (same initial weights, batches and augmentations), (b) - (c) "
            f"averages at most {points(max(paired))} points in absolute value."
        )
    per_replica_gaps = {cell: gap("per_replica", *cell) for cell in cells}
    outside = [cell for cell, (_, _, inside) in per_replica_gaps.items() if not inside]
    drop_cell, (drop, drop_spread, _) = min(per_replica_gaps.items(), key=lambda kv: kv[1][0])
    sentences.append(
        f"Per-replica batch norm (a) is outside the seed spread of (c) in {len(outside)} of "
        f"{len(cells)} cells; its largest shortfall is {points(-drop)} points "
        f"({algorithm_label(drop_cell[0])}, {drop_cell[1]} images per replica, seed spread "
        f"{points(drop_spread)})."
        if drop < 0
        else f"Per-replica batch norm (a) is never below one device (c) on average; it is "
        f"outside the seed spread of (c) in {len(outside)} of {len(cells)} cells."
    )
    smallest = min(config["batch_sizes"])
    if ("simclr", smallest) in per_replica_gaps:
        difference, spread, inside = per_replica_gaps["simclr", smallest]
        sentences.append(
            f"For SimCLR at {smallest} images per replica, the case where the literature "
            f"expects per-device statistics to hurt most, (a) - (c) is {points(difference)} "
            f"points (seed spread {points(spread)}): "
            + ("within the spread." if inside else "outside the spread.")
        )
    sentences.append(
        "Each comparison below: the paired per-seed difference to (c), mean ± standard "
        "deviation in points, and the seeds where it is positive; it exceeds the seed spread "
        "when its absolute mean is larger than both compared cells' standard deviations over "
        "seeds."
    )
    sentences += [
        text
        for algorithm in config["algorithms"]
        if (text := comparison_sentence(report, algorithm, [b for a, b in cells if a == algorithm]))
    ]
    sentences.append(baseline_sentence(report))
    return "\n\n".join(sentences) + "\n"


def per_seed_accuracy(report: dict[str, Any], algorithm: str, batch: int, setting: str) -> dict:
    """`{seed: kNN accuracy}` of one cell's runs."""
    return {
        r["seed"]: r["knn_accuracy"]
        for r in report["runs"]
        if (r["algorithm"], r["batch_per_replica"], r["setting"]) == (algorithm, batch, setting)
    }


def comparison_sentence(report: dict[str, Any], algorithm: str, batches: list[int]) -> str:
    """One algorithm's (a) - (c) and (b) - (c) at each batch size, each with its verdict."""
    summary = {(r["algorithm"], r["batch_per_replica"], r["setting"]): r for r in report["summary"]}
    parts = []
    for batch in batches:
        single = summary[algorithm, batch, "single"]
        for setting, label in (("per_replica", "(a)"), ("sync", "(b)")):
            row = summary[algorithm, batch, setting]
            if "diff_vs_single_mean" not in row:
                continue
            mean = row["diff_vs_single_mean"]
            spread = max(row["std"], single["std"])
            mine = per_seed_accuracy(report, algorithm, batch, setting)
            theirs = per_seed_accuracy(report, algorithm, batch, "single")
            positive = sum(mine[s] > theirs[s] for s in mine if s in theirs)
            paired = sum(s in theirs for s in mine)
            verdict = "exceeds the seed spread" if abs(mean) > spread else "within the seed spread"
            parts.append(
                f"{label} - (c) at {batch} images per replica {100 * mean:+.1f} ± "
                f"{points(row['diff_vs_single_std'])} (seed spread {points(spread)}, "
                f"{positive}/{paired} seeds > 0): {verdict}"
                if paired
                else f"{label} - (c) at {batch} images per replica {100 * mean:+.1f}: {verdict}"
            )
    if not parts:
        return ""
    return f"{algorithm_label(algorithm)}: " + "; ".join(parts) + "."


def paired_runs_sentence(report: dict[str, Any]) -> str:
    """How closely (a) and (b) track (c) run by run: same seed, weights, batches, views."""
    runs: dict[tuple[str, int, int], dict[str, dict[str, Any]]] = {}
    for run in report["runs"]:
        key = (run["algorithm"], run["batch_per_replica"], run["seed"])
        runs.setdefault(key, {})[run["setting"]] = run
    # One test image more or less correct changes the accuracy by 1 / test_images.
    resolution = 0.5 / report["meta"]["test_images"]
    parts = []
    for setting, label in (("sync", "(b)"), ("per_replica", "(a)")):
        pairs = [(r[setting], r["single"]) for r in runs.values() if setting in r and "single" in r]
        if not pairs:
            continue
        same = sum(abs(x["knn_accuracy"] - c["knn_accuracy"]) < resolution for x, c in pairs)
        accuracy_gap = max(abs(x["knn_accuracy"] - c["knn_accuracy"]) for x, c in pairs)
        text = (
            f"{label} gives exactly the same kNN accuracy as (c) in {same} of {len(pairs)} "
            f"paired runs (largest difference {points(accuracy_gap)} points)"
        )
        if setting == "sync":
            # Only (b) computes the loss on the same normalised activations as (c).
            loss_gap = max(abs(x["final_loss"] - c["final_loss"]) for x, c in pairs)
            text += f", and its last-epoch mean loss differs from (c)'s by at most {loss_gap:.2g}"
        parts.append(text)
    if not parts:
        return ""
    return (
        "Run by run (same seed, initial weights, batches and augmentations): "
        + "; ".join(parts)
        + "."
    )


def baseline_sentence(report: dict[str, Any]) -> str:
    """Where the trained models stand against the raw-pixel and untrained-backbone kNN.

    The untrained backbone of a seed is the initial network of every run of
    that seed, so each one-device (c) run is paired with it: the gain of
    training, judged against the larger of the two standard deviations over
    seeds.
    """
    baselines = report["baselines"]
    raw = next(b["knn_accuracy"] for b in baselines if b["name"] == "raw pixels")
    untrained_by_seed = {
        b.get("seed"): b["knn_accuracy"] for b in baselines if b["name"] == "untrained backbone"
    }
    untrained = list(untrained_by_seed.values())
    single = [r["mean"] for r in report["summary"] if r["setting"] == "single"]
    text = (
        f"For scale: one-device (c) accuracies range from {points(min(single))}% to "
        f"{points(max(single))}%, kNN on raw pixels reaches {points(raw)}%"
    )
    if not untrained:
        return text + "."
    untrained_mean = statistics.fmean(untrained)
    untrained_std = statistics.stdev(untrained) if len(untrained) > 1 else 0.0
    text += f", and the untrained backbone {points(untrained_mean)}%"
    if len(untrained) > 1:
        text += f" ± {points(untrained_std)}"
    gains = []
    for row in report["summary"]:
        if row["setting"] != "single":
            continue
        trained = per_seed_accuracy(report, row["algorithm"], row["batch_per_replica"], "single")
        differences = [
            v - untrained_by_seed[s] for s, v in trained.items() if s in untrained_by_seed
        ]
        if len(differences) < 2:
            continue
        mean = statistics.fmean(differences)
        verdict = "exceeds" if abs(mean) > max(row["std"], untrained_std) else "within"
        gains.append(
            f"{algorithm_label(row['algorithm'])} at {row['batch_per_replica']} "
            f"{100 * mean:+.1f} ± {points(statistics.stdev(differences))} ({verdict} the seed "
            "spread)"
        )
    if gains:
        text += (
            ". Training's paired gain over the untrained backbone, one device (c), in points: "
            + "; ".join(gains)
        )
    above = sum(r["mean"] > raw for r in report["summary"] if r["setting"] == "single")
    text += f". {above} of {len(single)} one-device cells are above raw pixels"
    if max(single) < untrained_mean:
        text += (
            ". Training lowered kNN accuracy below the untrained backbone's: at this size and "
            "length the runs compare what the three batch-norm settings do to training, not "
            "how good the learnt representations are"
        )
    return text + "."


SSL_INTRO = (
    "SimSiam, SimCLR and Barlow Twins trained self-supervised under (a) 4 replicas "
    "with per-replica batch norm, (b) 4 replicas with synchronised batch norm and (c) "
    "one device with the global batch; test kNN accuracy of the backbone's "
    "embeddings. Earlier runs of these sections on scikit-learn's 8x8 digits, where raw "
    "pixels leave no room to learn (see the digits paragraph further down), are in the "
    "project's history.\n"
)
SMALL_BATCH_INTRO = (
    "The regime where synchronised batch norm is used in practice (1-4 images per device, "
    "as in detection and high-resolution training): SimSiam and SimCLR with 2 and 4 images "
    "per replica (global batches of 8 and 16 over 4 replicas), under the same three "
    "settings. A supervised metric loss in the same regime (global vs per-replica mining "
    "and batch norm) is in the section from `metric_small_batch.json`.\n"
)


def plot_paired_differences(report: dict[str, Any], path: Path) -> None:
    """Per-seed paired differences to (c), mean ± std, one panel per algorithm."""
    config = report["meta"]["config"]
    algorithms = config["algorithms"]
    batches = config["batch_sizes"]
    summary = {(r["algorithm"], r["batch_per_replica"], r["setting"]): r for r in report["summary"]}
    figure, axes = plt.subplots(
        1, len(algorithms), figsize=(4.2 * len(algorithms), 3.6), sharey=True, squeeze=False
    )
    for axis, algorithm in zip(axes[0], algorithms, strict=True):
        for offset, setting in zip((-0.04, 0.04), ("per_replica", "sync"), strict=True):
            label, color, marker = SETTING_STYLE[setting]
            rows = [summary.get((algorithm, b, setting)) for b in batches]
            kept = [
                (b, r)
                for b, r in zip(batches, rows, strict=True)
                if r and "diff_vs_single_mean" in r
            ]
            axis.errorbar(
                [b * 2**offset for b, _ in kept],
                [100 * r["diff_vs_single_mean"] for _, r in kept],
                yerr=[100 * r["diff_vs_single_std"] for _, r in kept],
                label=f"{label} - (c)",
                color=color,
                marker=marker,
                capsize=4,
                linewidth=1.5,
            )
        axis.axhline(0.0, color="black", linewidth=0.8, linestyle="--")
        axis.set_xscale("log", base=2)
        axis.set_xlim(min(batches) / 1.6, max(batches) * 1.6)
        axis.set_xticks(batches, [str(b) for b in batches])
        axis.minorticks_off()
        axis.set_xlabel("images per replica (global batch = 4x)")
        axis.set_title(algorithm_label(algorithm))
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("kNN accuracy minus one device's (points)")
    axes[0][-1].legend(fontsize=8, loc="best")
    n = max(r["n"] for r in report["summary"])
    figure.suptitle(f"Paired differences to one device, mean ± std over {n} seed(s)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# Before commit c910ea3 (on main from this time on), the self-supervised quality benchmark's
# Trainer zeroed every optimizer variable before each run, Adam's learning rate included: no
# run trained.
TRAINER_FIXED_UTC = "2026-12-01T12:39:06+00:00"
INVALID_SSL_RESULTS = (
    "**These results are invalid.** They were measured before a fix to "
    "the self-supervised quality benchmark (commit c910ea3): its trainer reset every optimizer "
    "variable to zero before each run, Adam's learning rate included, so no run trained; only "
    "the batch-norm moving statistics changed. Rerun `{command}`, then `{report}`.\n\n"
)
# The benchmark that writes each self-supervised results file.
SSL_MODULES = {
    "ssl_quality.json": "benchmark.self_supervised.quality",
    "ssl_small_batch.json": "benchmark.self_supervised.small_batch",
}


def ssl_section(
    report: dict[str, Any],
    plot: Path,
    results_name: str,
    title: str = "Representation quality: per-replica vs synchronised batch norm",
    intro: str = SSL_INTRO,
    paired_plot: Path | None = None,
) -> str:
    meta = report["meta"]
    figure_source = (
        f"Figure: `{meta['command']}`, then `{REPORT_COMMAND}` (from `{results_name}`).\n"
    )
    if meta["date_utc"] < TRAINER_FIXED_UTC:
        command = command_line(SSL_MODULES[results_name])
        intro = INVALID_SSL_RESULTS.format(command=command, report=REPORT_COMMAND) + intro
    paired = (
        []
        if paired_plot is None
        else [f"![Paired differences to one device]({paired_plot.name})\n", figure_source]
    )
    return "\n".join(
        [
            f"## {title}\n",
            intro,
            quality_tables.setup_markdown(report),
            f"![kNN accuracy vs per-replica batch]({plot.name})\n",
            figure_source,
            *paired,
            quality_tables.tables_markdown(report, level=3),
            "### Conclusion\n",
            ssl_conclusion(report),
        ]
    )


# --------------------------------------------------------------------------------------
# Sections that their own benchmark renders, and the digits paragraph.
# --------------------------------------------------------------------------------------


# Results rendered by their own benchmark's `render_markdown`: file -> (module, section title).
SCRIPT_SECTIONS = {
    "glyphs_runs.json": ("benchmark.glyphs.runs", "Both jobs' default runs on glyphs"),
    "glyphs_ssl_length.json": (
        "benchmark.glyphs.ssl_length",
        "The self-supervised job on glyphs by width and length of run",
    ),
    "architectures.json": ("benchmark.architectures", "Architecture builders"),
    "index.json": ("benchmark.index", "Search backends"),
    "metric_losses.json": (
        "benchmark.metric.losses",
        "Metric losses: global vs per-replica mining",
    ),
}


def script_section(results_name: str, report: dict[str, Any]) -> str:
    """The section of a results file whose benchmark renders its own tables."""
    module, title = SCRIPT_SECTIONS[results_name]
    command = command_line(module, ["--quick"] if report.get("quick") else [])
    return "\n".join(
        [
            f"## {title} (`{results_name}`)\n",
            f"Command: `{command}`.\n",
            render_tables(module, report, results_name, command).rstrip("\n") + "\n",
        ]
    )


def digits_section(report: dict[str, Any]) -> str:
    """Why the jobs moved from the digits to glyphs: the digits' unseen-class ceiling."""

    def spread(method: str, protocol: str = "loo", group: str = "unseen") -> str:
        values = [report["figures"][str(seed)][method][protocol][group] for seed in report["seeds"]]
        return ", ".join(f"{value:.3f}" for value in values)

    seeds = ", ".join(str(seed) for seed in report["seeds"])
    return "\n".join(
        [
            "## What the 8x8 digits could not show (`unseen_digits.json`)\n",
            f"Measured {report['date'][:10]} by `{report['command']}` (removed since; in the "
            "project's history), on the supervised job's default run when it trained on "
            "scikit-learn's digits 0-5. Unseen-class (6-9) recall@1, leave-one-out over all "
            f"1,797 digits, seeds {seeds}: raw pixels {spread('pixels')}; a linear metric "
            f"learnt on the seen classes (NCA) {spread('nca')}; the untrained network "
            f"{spread('untrained')}; the trained network {spread('trained')} (its seen "
            f"classes: {spread('trained', group='seen')}, the pixels' "
            f"{spread('pixels', group='seen')}). The pixels start near the ceiling, so a "
            "metric learnt on six digits, the network's or a textbook one, had almost no room "
            "to find the other four better, and the trained network stayed below its "
            'untrained self and the pixels: a first run read as "it does not work". Both '
            "jobs now default to glyphs (`tensorflow_similarity.datasets.load_glyphs`), where "
            "the raw pixels leave room to learn.\n",
        ]
    )


# --------------------------------------------------------------------------------------
# The report.
# --------------------------------------------------------------------------------------


def machines_table(sources: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, report in sources.items():
        meta = report.get("meta", report)
        rows.append(
            [
                f"`{name}`",
                meta.get("date_utc") or meta.get("date", "?"),
                meta.get("hardware") or meta.get("machine", "?"),
                meta.get("platform", "-"),
                f"TF {meta.get('tensorflow', '?')}, Keras {meta.get('keras', '?')}",
            ]
        )
    return markdown_table(["results", "date", "machine", "platform", "versions"], rows)


def display_path(path: Path) -> str:
    """`path` relative to the repository root when it is inside it."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def build_report(results: Path, out: Path) -> str:
    """Writes the plots into `out` and returns the markdown of REPORT.md."""
    sources = {
        name: data
        for name in (
            "ssl_quality.json",
            "ssl_small_batch.json",
            "metric_small_batch.json",
            "sync_bn.json",
            "sync_bn_gpu.json",
            *SCRIPT_SECTIONS,
            "unseen_digits.json",
        )
        if (data := load_json(results / name)) is not None
    }
    generated = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    parts = [
        "# Benchmark report\n",
        f"Assembled by `{REPORT_COMMAND}` from the JSON results in "
        f"`{display_path(results)}/`, {generated} (UTC). Every number and figure below is "
        "computed from those files; each section names the command that produced its data.\n",
    ]
    if not sources:
        parts.append("No results found: run the benchmark scripts first.\n")
        return "\n".join(parts)
    parts += ["## Machines\n", machines_table(sources) + "\n"]

    if "ssl_quality.json" in sources:
        plot = out / "ssl_quality.png"
        plot_ssl_quality(sources["ssl_quality.json"], plot)
        parts.append(ssl_section(sources["ssl_quality.json"], plot, "ssl_quality.json"))
    if "ssl_small_batch.json" in sources:
        small = sources["ssl_small_batch.json"]
        plot = out / "ssl_small_batch.png"
        paired_plot = out / "ssl_small_batch_paired.png"
        plot_ssl_quality(small, plot)
        plot_paired_differences(small, paired_plot)
        parts.append(
            ssl_section(
                small,
                plot,
                "ssl_small_batch.json",
                title="Where sync batch norm should matter: 2 and 4 images per replica",
                intro=SMALL_BATCH_INTRO,
                paired_plot=paired_plot,
            )
        )
    if "metric_small_batch.json" in sources:
        parts.append(
            small_batch_tables.report_section(
                sources["metric_small_batch.json"], out, "metric_small_batch.json"
            )
        )
    for name in ("sync_bn.json", "sync_bn_gpu.json"):
        if name in sources:
            plot = out / name.replace(".json", "_overhead.png")
            drawn = plot_overhead(sources[name], plot)
            bytes_plot = out / name.replace(".json", "_bytes.png")
            bytes_drawn = plot_batch_norm_bytes(sources[name], bytes_plot)
            parts.append(
                sync_bn_section(
                    sources[name],
                    plot if drawn else None,
                    name,
                    bytes_plot if bytes_drawn else None,
                )
            )
    parts += [script_section(name, sources[name]) for name in SCRIPT_SECTIONS if name in sources]
    if "unseen_digits.json" in sources:
        parts.append(digits_section(sources["unseen_digits.json"]))
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> Path:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    out = args.out or args.results
    out.mkdir(parents=True, exist_ok=True)
    markdown = build_report(args.results, out)
    path = out / "REPORT.md"
    path.write_text(markdown)
    print(f"Wrote {path}")
    return path


if __name__ == "__main__":
    main()
