"""The cells of `benchmark.self_supervised.quality` and their markdown tables.

What a `ssl_quality.json` describes (the algorithms, the three batch-norm
settings, the replica count, the kNN evaluation) and how it is rendered, for
`quality.py`, which writes the file, and `report.py`, its section of `REPORT.md`.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmark.common import markdown_table

NUM_REPLICAS = 4
ALGORITHMS = ("simsiam", "simclr", "barlow")
ALGORITHM_LABELS = {"simsiam": "SimSiam", "simclr": "SimCLR", "barlow": "Barlow Twins"}
SETTINGS = ("per_replica", "sync", "single")
SETTING_LABELS = {
    "per_replica": "(a) per-replica BN",
    "sync": "(b) synchronised BN",
    "single": "(c) one device",
}
KNN_K = 20
KNN_TEMPERATURE = 0.07


def percent(value: float) -> str:
    return f"{100 * value:.1f}"


def cell_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    return (
        f"{percent(row['mean'])} ± {percent(row['std'])} "
        f"({percent(row['min'])}-{percent(row['max'])})"
    )


def diff_text(row: dict[str, Any] | None) -> str:
    if row is None or "diff_vs_single_mean" not in row:
        return "-"
    return f"{100 * row['diff_vs_single_mean']:+.1f} ± {percent(row['diff_vs_single_std'])}"


def setup_markdown(report: dict[str, Any]) -> str:
    """The run's machine, command, data, model and evaluation, as a markdown list."""
    meta = report["meta"]
    config = meta["config"]
    baselines = report["baselines"]
    random_init = [b["knn_accuracy"] for b in baselines if b["name"] == "untrained backbone"]
    raw = next(b["knn_accuracy"] for b in baselines if b["name"] == "raw pixels")
    parts = [
        f"- Machine: {meta['hardware']}; {meta['platform']}",
        f"- TensorFlow {meta['tensorflow']}, Keras {meta['keras']}, Python {meta['python']}",
        f"- Date (UTC): {meta['date_utc']}; wall time {meta['elapsed_s'] / 60:.1f} min",
        f"- Command: `{meta['command']}`",
        f"- Data: {meta['data_source']}, {meta['train_images']} training / "
        f"{meta['test_images']} test images at {config['image_size']}x{config['image_size']}",
        f"- Model: ResNet-style backbone, widths {config['width']}/{2 * config['width']}/"
        f"{4 * config['width']} ({meta['backbone_params']:,} parameters, "
        f"{meta['backbone_batch_norm_layers']} batch-norm layers), projector "
        f"{2 * config['projector_dim']}-{config['projector_dim']}; Adam, learning rate "
        f"{config['learning_rate']:g}; {config['epochs']} epoch(s); seeds "
        f"{', '.join(str(s) for s in config['seeds'])}"
        + (" (**--quick**: checks the pipeline only)" if config["quick"] else ""),
        f"- kNN: k={KNN_K}, temperature {KNN_TEMPERATURE}, backbone embeddings, train set as "
        "memory, test set as queries. "
        + (
            "Trained backbones: batch-norm moving statistics recomputed from the clean "
            "training images before evaluation (precise BN, as the tfsim jobs do). "
            if meta.get("precise_bn")
            else ""
        )
        + "References"
        + (" (evaluated as built, no recomputation)" if meta.get("precise_bn") else "")
        + ": raw pixels "
        f"{percent(raw)}%, untrained backbone "
        + (
            f"{percent(statistics.fmean(random_init))}%"
            + (f" ± {percent(statistics.stdev(random_init))}" if len(random_init) > 1 else "")
            if random_init
            else "-"
        )
        + ".",
    ]
    if not meta.get("complete", True):
        finished = sorted({r["seed"] for r in report["runs"]})
        parts.append(
            f"- **Incomplete run**: stopped after seed(s) {', '.join(map(str, finished))}; "
            "the tables hold those seeds only."
        )
    parts.append("")
    return "\n".join(parts)


def tables_markdown(report: dict[str, Any], level: int = 2) -> str:
    """One markdown table per algorithm, under headings of `level`."""
    config = report["meta"]["config"]
    summary = {(r["algorithm"], r["batch_per_replica"], r["setting"]): r for r in report["summary"]}
    parts = [
        f"(a) and (b): {NUM_REPLICAS} replicas with `b` images each; (c): one device with "
        f"the global batch of {NUM_REPLICAS} `b`. Same initial weights, batches and "
        "augmentations for a, b and c within a seed; every batch size trains the same number "
        "of epochs, so 4x the batch means 4x fewer steps. "
        + (
            "Every trained backbone is evaluated after recomputing its batch-norm moving "
            "statistics from the clean training images (precise BN); the untrained backbone "
            "is evaluated as built. "
            if report["meta"].get("precise_bn")
            else ""
        )
        + "Accuracy in %: mean ± sample standard "
        "deviation over seeds (min-max). `- (c)`: the paired per-seed difference to (c), in "
        "points, mean ± standard deviation.\n",
    ]
    for algorithm in config["algorithms"]:
        rows = []
        for batch in config["batch_sizes"]:
            cells = {s: summary.get((algorithm, batch, s)) for s in SETTINGS}
            rows.append(
                [
                    batch,
                    NUM_REPLICAS * batch,
                    cell_text(cells["per_replica"]),
                    cell_text(cells["sync"]),
                    cell_text(cells["single"]),
                    diff_text(cells["per_replica"]),
                    diff_text(cells["sync"]),
                ]
            )
        parts.append(f"{'#' * level} {ALGORITHM_LABELS[algorithm]}\n")
        parts.append(
            markdown_table(
                [
                    "per-replica batch",
                    "global batch",
                    SETTING_LABELS["per_replica"],
                    SETTING_LABELS["sync"],
                    SETTING_LABELS["single"],
                    "(a) - (c)",
                    "(b) - (c)",
                ],
                rows,
            )
            + "\n"
        )
    return "\n".join(parts)


def render_markdown(report: dict[str, Any]) -> str:
    return "\n".join(
        [
            "# Self-supervised quality: per-replica vs synchronised batch norm\n",
            setup_markdown(report),
            tables_markdown(report),
        ]
    )
