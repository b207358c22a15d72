"""The conclusions of the self-supervised sections of `REPORT.md`, in plain language.

Every sentence is computed from a `ssl_quality.json` or `ssl_small_batch.json`
(written by `python -m benchmark.self_supervised.quality` and `.small_batch`):
how (a) per-replica and (b) synchronised batch norm compare with (c) one device,
judged against the spread over seeds, and where the trained models stand against
raw pixels and the untrained backbone.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmark.self_supervised.quality_tables import ALGORITHM_LABELS, SETTINGS


def points(value: float) -> str:
    """A difference of accuracies (fractions) in percentage points."""
    return f"{100 * value:.1f}"


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
