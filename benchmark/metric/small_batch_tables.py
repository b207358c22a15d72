"""The tables and plot of `benchmark.metric.small_batch`, from its JSON alone.

Used by that benchmark, which writes the results, and by `benchmark/report.py`,
which puts them into `REPORT.md`; no TensorFlow here.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmark.common import REPORT_COMMAND, markdown_table, render_tables  # noqa: E402

NUM_REPLICAS = 4
CLASSES_PER_BATCH = 4
SETTINGS = ("per_replica", "per_replica_bn", "sync", "single")
SETTING_LABELS = {
    "per_replica": "(a) per-replica BN + mining (0.17)",
    "per_replica_bn": "(b) per-replica BN, global mining",
    "sync": "(c) sync BN, global mining",
    "single": "(d) one device",
}
# Paired per-seed differences: label -> (minuend, subtrahend).
COMPARISONS = {
    "global - per-replica mining: (b) - (a)": ("per_replica_bn", "per_replica"),
    "sync - per-replica BN: (c) - (b)": ("sync", "per_replica_bn"),
    "ours - 0.17: (c) - (a)": ("sync", "per_replica"),
    "sync vs one device: (c) - (d)": ("sync", "single"),
}
COMPARISON_COLORS = ("tab:red", "tab:blue", "tab:purple", "tab:gray")
SPLITS = ("seen", "unseen")
METRICS = ("recall@1", "map@r")
METRIC_LABELS = {"recall@1": "recall@1", "map@r": "mAP@R"}


def spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {sd:.3f}"


def signed_spread(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):+.3f} ± {sd:.3f}"


def per_seed(payload: dict[str, Any], setting: str, batch: int, key: str) -> dict[int, float]:
    """`{seed: value}` of one setting, batch size and result key."""
    return {
        r["seed"]: r[key]
        for r in payload["runs"]
        if r["setting"] == setting and r["batch_per_replica"] == batch
    }


def paired_differences(
    payload: dict[str, Any], comparison: str, batch: int, key: str
) -> dict[int, float]:
    """`{seed: minuend - subtrahend}` over the seeds both settings finished."""
    minuend, subtrahend = COMPARISONS[comparison]
    left = per_seed(payload, minuend, batch, key)
    right = per_seed(payload, subtrahend, batch, key)
    return {s: left[s] - right[s] for s in sorted(left) if s in right}


def positive_text(differences: list[float]) -> str:
    return f"{sum(d > 0 for d in differences)}/{len(differences)}"


def quality_table(payload: dict[str, Any]) -> str:
    raw = payload.get("raw_pixels", {})
    rows = []
    for batch in payload["meta"]["batch_sizes"]:
        for split in SPLITS:
            for metric in METRICS:
                key = f"{split}_{metric}"
                cells = [per_seed(payload, s, batch, key) for s in SETTINGS]
                if not all(cells):
                    continue
                rows.append(
                    [
                        batch,
                        NUM_REPLICAS * batch,
                        f"{split} {METRIC_LABELS[metric]}",
                        f"{raw[key]:.3f}" if key in raw else "-",
                        spread([u[key] for u in payload["untrained"]]),
                        *(spread(list(c.values())) for c in cells),
                    ]
                )
    header = ["per-replica batch", "global batch", "retrieval", "raw pixels", "untrained"]
    return markdown_table(header + [SETTING_LABELS[s] for s in SETTINGS], rows)


def paired_table(payload: dict[str, Any]) -> str:
    rows = []
    for batch in payload["meta"]["batch_sizes"]:
        for split in SPLITS:
            for metric in METRICS:
                key = f"{split}_{metric}"
                found = [
                    list(paired_differences(payload, c, batch, key).values()) for c in COMPARISONS
                ]
                if not all(found):
                    continue
                rows.append(
                    [batch, NUM_REPLICAS * batch, f"{split} {METRIC_LABELS[metric]}"]
                    + [f"{signed_spread(d)} ({positive_text(d)})" for d in found]
                )
    return markdown_table(["per-replica batch", "global batch", "retrieval", *COMPARISONS], rows)


def loss_table(payload: dict[str, Any]) -> str:
    rows = []
    for batch in payload["meta"]["batch_sizes"]:
        cells = []
        for setting in SETTINGS:
            losses = [
                r["losses"]
                for r in payload["runs"]
                if r["setting"] == setting and r["batch_per_replica"] == batch
            ]
            cells.append(
                "-"
                if not losses
                else f"{spread([r[0] for r in losses])} -> {spread([r[-1] for r in losses])}"
            )
        rows.append([batch, NUM_REPLICAS * batch, *cells])
    return markdown_table(
        ["per-replica batch", "global batch", *(SETTING_LABELS[s] for s in SETTINGS)], rows
    )


def seed_spread(payload: dict[str, Any], comparison: str, batch: int, key: str) -> float:
    """The larger of the two compared settings' standard deviations over seeds."""
    spreads = []
    for setting in COMPARISONS[comparison]:
        values = list(per_seed(payload, setting, batch, key).values())
        spreads.append(statistics.stdev(values) if len(values) > 1 else 0.0)
    return max(spreads)


def verdict(mean: float, spread_: float, seeds: int) -> str:
    """Whether a mean paired difference exceeds the seed spread, in words."""
    if seeds < 2:
        return "one seed, no spread to judge it against"
    return "exceeds the seed spread" if abs(mean) > spread_ else "within the seed spread"


def comparison_sentence(payload: dict[str, Any], comparison: str) -> str:
    """One sentence: the comparison's paired differences in every cell, each with its verdict.

    A difference exceeds the seed spread when the absolute mean of its per-seed
    paired differences is larger than both compared settings' standard
    deviations over seeds.
    """
    parts = []
    for batch in payload["meta"]["batch_sizes"]:
        for split in SPLITS:
            for metric in METRICS:
                key = f"{split}_{metric}"
                d = list(paired_differences(payload, comparison, batch, key).values())
                if not d:
                    continue
                spread_ = seed_spread(payload, comparison, batch, key)
                parts.append(
                    f"{batch}/replica {split} {METRIC_LABELS[metric]} {signed_spread(d)} "
                    f"(seed spread {spread_:.3f}, {positive_text(d)} seeds > 0: "
                    f"{verdict(statistics.fmean(d), spread_, len(d))})"
                )
    if not parts:
        return ""
    return f"{comparison}: " + "; ".join(parts) + "."


def references_sentence(payload: dict[str, Any]) -> str:
    """Where one device's trained model stands against raw pixels and the untrained model."""
    raw = payload.get("raw_pixels")
    untrained = payload["untrained"]
    if not raw or not untrained:
        return ""
    parts = []
    for split in SPLITS:
        key = f"{split}_recall@1"
        before = [u[key] for u in untrained]
        for batch in payload["meta"]["batch_sizes"]:
            after = per_seed(payload, "single", batch, key)
            if not after:
                continue
            gains = [after[u["seed"]] - u[key] for u in untrained if u["seed"] in after]
            spread_ = max(
                statistics.stdev(v) if len(v) > 1 else 0.0 for v in (before, list(after.values()))
            )
            parts.append(
                f"{split} classes at {batch}/replica, (d) {spread(list(after.values()))} "
                f"against the untrained {spread(before)} (paired gain {signed_spread(gains)}, "
                f"{verdict(statistics.fmean(gains), spread_, len(gains))}) and raw pixels' "
                f"{raw[key]:.3f}"
            )
    return "References, recall@1: " + "; ".join(parts) + "."


def findings(payload: dict[str, Any]) -> str:
    """Sentences computed from the runs: what per-replica mining trained, what each change did."""
    sentences = []
    if payload["meta"]["quick"]:
        sentences.append(
            "This is a `--quick` run (a few steps): it checks the pipeline; its numbers say "
            "nothing about the settings."
        )
    mined = [r for r in payload["runs"] if r["setting"] == "per_replica"]
    zero = sum(all(loss == 0.0 for loss in r["losses"]) for r in mined)
    sentences.append(
        f"Per-replica mining (a): the mean training loss was exactly 0 in every epoch of {zero} "
        f"of {len(mined)} runs. Each replica's share holds one class, so no anchor has a "
        "negative and every anchor's term is 0 (a defined 0, not NaN): the weights get no "
        "gradient, and only the batch-norm moving statistics change"
        + (
            ", which the evaluation then recomputes: (a)'s figures are those of the untrained "
            "model with precise BN, beside `untrained`, the same weights with the statistics "
            "they were built with."
            if payload["meta"].get("precise_bn")
            else "."
        )
    )
    pairs = [
        (r, s)
        for r in payload["runs"]
        for s in payload["runs"]
        if r["setting"] == "sync"
        and s["setting"] == "single"
        and (r["seed"], r["batch_per_replica"]) == (s["seed"], s["batch_per_replica"])
    ]
    if pairs:
        loss_gap = max(abs(r["losses"][0] / s["losses"][0] - 1) for r, s in pairs)
        floor = max(
            abs(statistics.fmean(d))
            for batch in payload["meta"]["batch_sizes"]
            for key in (f"{split}_{metric}" for split in SPLITS for metric in METRICS)
            if (
                d := list(
                    paired_differences(
                        payload, "sync vs one device: (c) - (d)", batch, key
                    ).values()
                )
            )
        )
        sentences.append(
            "(c) and (d) compute the same steps (same batches, batch statistics and mining "
            f"over the global batch); their first-epoch mean losses differ by at most "
            f"{100 * loss_gap:.1f}% (floating-point differences that training amplifies: over "
            "a 3-step run the smoke test finds them within 0.1%), and "
            f"the largest mean paired retrieval difference between them, {floor:.3f}, is the "
            "noise floor against which the other differences are read."
        )
    if reference := references_sentence(payload):
        sentences.append(reference)
    sentences.append(
        "Each comparison below: the mean ± standard deviation over seeds of the per-seed "
        "paired difference; it exceeds the seed spread when its absolute mean is larger than "
        "both compared settings' standard deviations over seeds."
    )
    sentences += [s for c in COMPARISONS if (s := comparison_sentence(payload, c))]
    return "\n\n".join(sentences) + "\n"


def data_text(meta: dict[str, Any]) -> tuple[str, str, str]:
    """What the model saw: (data at its size, the seen classes, the unseen classes)."""
    size = meta.get("image_size", 8)
    if meta.get("data", "digits") == "digits":
        return f"{size}x{size} digits", "digits 0-5", "digits 6-9"
    seen, unseen = meta["seen_class_names"], meta["unseen_class_names"]
    return (
        f"{meta['data_source']} at {size}x{size}",
        f"the {len(seen)} seen (Latin) classes",
        f"the {len(unseen)} unseen (Greek and Cyrillic) classes",
    )


def render_markdown(payload: dict[str, Any]) -> str:
    meta = payload["meta"]
    seeds = meta["seeds"]
    data, seen, unseen = data_text(meta)
    setup = (
        f"{meta['machine']}; TF {meta['tensorflow']}, Keras {meta['keras']}; "
        f"{meta['date_utc']} (UTC); wall time {meta['elapsed_s'] / 60:.1f} min; "
        f"command `{meta['command']}`"
        + ("" if meta.get("complete", True) else "; **incomplete run**")
        + ".\n\n"
        "MultiSimilarityLoss, small ResNet-style backbone (benchmark/self_supervised/quality.py's) "
        f"+ average pooling + 64-d MetricEmbedding, {data}, SGD (learning rate "
        f"{meta['learning_rate']:g}, momentum 0.9), {meta['epochs']} epoch(s) of "
        f"{meta['steps_per_epoch']} steps at every batch size; MultiShotMemorySampler batches "
        f"of {CLASSES_PER_BATCH} classes x `b` images, grouped by class, so each of the "
        f"{NUM_REPLICAS} replicas' shares holds one class. Trained on {meta['train_images']} "
        f"images of {seen}. Leave-one-out retrieval (cosine) among {meta['seen_images']} "
        f"held-out images of {seen} (seen) and {meta['unseen_images']} images of {unseen} "
        "(unseen). Mean ± sample standard deviation over seeds "
        f"{', '.join(map(str, seeds))}; same initial weights and batches in every setting of "
        "a seed. "
        + (
            "Every trained model's batch-norm moving statistics are recomputed from the clean "
            "seen training images before evaluation (precise BN, as the tfsim jobs do); "
            "`untrained`: the seed's initial model, evaluated as built (no recomputation); "
            "`raw pixels`: the flattened images.\n"
            if meta.get("precise_bn")
            else "`untrained`: the seed's initial model.\n"
        )
    )
    return "\n".join(
        [
            "# Metric loss at 2 and 4 images per replica: mining and batch norm\n",
            setup,
            "## Retrieval quality\n",
            quality_table(payload) + "\n",
            "## Paired differences per seed\n",
            "Mean ± standard deviation over seeds of the per-seed difference (same initial "
            "weights and batches); in brackets, the seeds where it is positive.\n",
            paired_table(payload) + "\n",
            "## Training loss (first -> last epoch, mean as Keras reports it)\n",
            loss_table(payload) + "\n",
            "## Findings\n",
            findings(payload),
        ]
    )


def plot_paired_differences(payload: dict[str, Any], path: Path) -> None:
    """Per-seed paired differences (dots) and their mean ± std, one panel per split and metric."""
    batches = payload["meta"]["batch_sizes"]
    figure, axes = plt.subplots(
        len(SPLITS), len(METRICS), figsize=(10, 7), sharex=True, squeeze=False
    )
    width = 0.8 / len(COMPARISONS)
    for row, split in enumerate(SPLITS):
        for column, metric in enumerate(METRICS):
            axis = axes[row][column]
            key = f"{split}_{metric}"
            for i, (comparison, color) in enumerate(
                zip(COMPARISONS, COMPARISON_COLORS, strict=True)
            ):
                for j, batch in enumerate(batches):
                    d = list(paired_differences(payload, comparison, batch, key).values())
                    if not d:
                        continue
                    x = j + (i - (len(COMPARISONS) - 1) / 2) * width
                    sd = statistics.stdev(d) if len(d) > 1 else 0.0
                    axis.errorbar(
                        [x],
                        [statistics.fmean(d)],
                        yerr=[sd],
                        color=color,
                        marker="s",
                        capsize=4,
                        label=comparison if j == 0 else None,
                    )
                    axis.scatter([x] * len(d), d, color=color, s=12, alpha=0.5)
            axis.axhline(0.0, color="black", linewidth=0.8, linestyle="--")
            axis.set_xticks(
                range(len(batches)), [f"{b} ({NUM_REPLICAS * b} global)" for b in batches]
            )
            axis.set_title(f"{split} classes, {METRIC_LABELS[metric]}")
            axis.grid(alpha=0.3)
            if row == len(SPLITS) - 1:
                axis.set_xlabel("images per replica")
    axes[0][0].set_ylabel("paired difference")
    axes[1][0].set_ylabel("paired difference")
    axes[0][-1].legend(fontsize=7, loc="best")
    figure.suptitle(
        f"MultiSimilarityLoss: paired differences per seed (dots), mean ± std over "
        f"{len(payload['meta']['seeds'])} seed(s)",
        fontsize=11,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def report_section(payload: dict[str, Any], out: Path, results_name: str) -> str:
    """`REPORT.md`'s section: the plot (written into `out`) and the tables, headings nested."""
    plot = out / results_name.replace(".json", ".png")
    plot_paired_differences(payload, plot)
    command = payload["meta"]["command"]
    return "\n".join(
        [
            "## Where mining and sync batch norm should matter: a metric loss at 2 and 4 "
            f"images per replica (`{results_name}`)\n",
            f"![Paired differences per seed]({plot.name})\n",
            f"Figure: `{command}`, then `{REPORT_COMMAND}` (from `{results_name}`).\n",
            render_tables("benchmark.metric.small_batch_tables", payload, results_name, command),
        ]
    )
