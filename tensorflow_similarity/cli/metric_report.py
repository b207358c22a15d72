"""What a metric-learning `tfsim` run reports: its first line, summary table and plots.

history.json, TensorBoard's scalars and loss.png are every run's (`report`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tensorflow_similarity.cli import report
from tensorflow_similarity.cli.devices import DevicePlan
from tensorflow_similarity.cli.retrieval import FIGURES, GROUPS, figure_name
from tensorflow_similarity.datasets import ImageData
from tensorflow_similarity.indexer import Indexer

_TITLES = {"recall_at_1": "recall@1", "map_at_r": "mAP@R"}


def first_line(
    args: argparse.Namespace,
    data: ImageData,
    seen_images: int,
    plan: DevicePlan,
    batch_norm: str,
    before: dict[str, float],
) -> str:
    """The line printed before training: what trains on what, and the untrained figures."""
    size = args.image_size
    unseen = before.get(figure_name("recall_at_1", "unseen"))
    untrained = f"recall@1 before training: seen {before[figure_name('recall_at_1', 'seen')]:.3f}"
    if unseen is not None:
        untrained += f", unseen {unseen:.3f}"
    return (
        f"tfsim: {args.algorithm} with {args.backbone} on {data.source}: {seen_images} train "
        f"images of the first {args.train_classes} of {data.num_classes} classes, "
        f"{len(data.y_train)} indexed, {len(data.y_test)} test queries at {size}x{size}; "
        f"{plan.replicas} replicas ({args.strategy}), batch norm {batch_norm}; {untrained}"
    )


def summary(
    args: argparse.Namespace,
    records: list[dict[str, Any]],
    before: dict[str, float],
    index_size: int,
    pixels: dict[str, float],
) -> dict[str, Any]:
    """Returns the job's part of the run's summary (summary.json, and the rows of `table`).

    `pixels` are the figures of the raw pixels (flattened images searched by
    cosine), the reference printed beside the network's. `run.run` adds
    `report.run_figures`.
    """
    after = {key: records[-1][key] for key in before if key in records[-1]}
    return {
        "algorithm": args.algorithm,
        "before": dict(before),
        "after": after,
        "pixels": dict(pixels),
        "train_classes": args.train_classes,
        "index_size": index_size,
    }


def table(summary: dict[str, Any]) -> str:
    """Returns `summary` as the table printed at the end of a run."""
    pixels = summary.get("pixels") or {}
    rows = [("", "raw pixels", "before training", "after training")]

    def figures(key: str) -> tuple[str, str, str]:
        reference = f"{pixels[key]:.3f}" if key in pixels else "-"
        return reference, f"{summary['before'][key]:.3f}", f"{summary['after'][key]:.3f}"

    for group in GROUPS:
        for figure in FIGURES:
            key = figure_name(figure, group)
            if key in summary["before"]:
                rows.append((f"{_TITLES[figure]}, {group} classes", *figures(key)))
    # Augmented queries (when the run augments): recall@1 only; history.json has mAP@R too.
    for group in GROUPS:
        key = figure_name("recall_at_1", group, augmented=True)
        if key in summary["before"] and key in summary["after"]:
            rows.append((f"recall@1, {group} classes, augmented queries", *figures(key)))
    for name, value in (
        ("images per second (training)", f"{summary['images_per_second']:.1f}"),
        ("seconds per epoch (training)", f"{summary['seconds_per_epoch']:.1f}"),
        ("epochs", str(summary["epochs"])),
        ("classes trained on", str(summary["train_classes"])),
        ("images indexed", str(summary["index_size"])),
        ("replicas", f"{summary['replicas']} ({summary['strategy']})"),
        ("batch norm", summary["batch_norm"]),
    ):
        rows.append((name, value))
    # A row of one value spans the value columns: widen the last if it needs more.
    columns = len(rows[0])
    paired = [row for row in rows if len(row) == columns]
    widths = [max(len(row[i]) for row in (rows if i == 0 else paired)) for i in range(columns)]
    spanned = sum(widths[1:]) + 3 * (columns - 2)
    widths[-1] += max(0, max(len(row[1]) for row in rows if len(row) == 2) - spanned)
    spanned = sum(widths[1:]) + 3 * (columns - 2)
    rule = "+-" + "-+-".join("-" * w for w in widths) + "-+"
    lines = [rule]
    for number, row in enumerate(rows):
        if len(row) == columns:
            lines.append(
                "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
            )
        else:
            lines.append(f"| {row[0].ljust(widths[0])} | {row[1].ljust(spanned)} |")
        if number == 0:
            lines.append(rule)
    lines.append(rule)
    return "\n".join(lines)


def retrieval_figure(
    records: list[dict[str, Any]], before: dict[str, float], pixels: dict[str, float]
) -> Figure:
    """Each retrieval figure by epoch (0: before training), beside the raw pixels' line.

    The raw pixels' value of a figure (what the final table prints) is a
    dashed horizontal line of the curve's colour.
    """
    figure = Figure(figsize=(6.5, 4.5))
    axis = figure.subplots()
    for key in before:
        epochs, values = report.evaluated_curve(records, key, before[key])
        (line,) = axis.plot(epochs, values, marker="o", label=key.replace("_", " "))
        if key in pixels:
            axis.axhline(
                pixels[key],
                color=line.get_color(),
                linestyle="--",
                label=f"{key.replace('_', ' ')}, raw pixels ({pixels[key]:.3f})",
            )
    axis.set(xlabel="epoch (0: before training)", ylabel="test images", title="Retrieval")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    figure.tight_layout()
    return figure


def plot(
    output: Path,
    records: list[dict[str, Any]],
    before: dict[str, float],
    pixels: dict[str, float],
    index: Indexer,
    test_embeddings: np.ndarray,
    data: ImageData,
    train_classes: int,
    seed: int,
) -> None:
    """Writes loss.png, retrieval.png, neighbours.png and embeddings.png to `output`.

    retrieval.png: `retrieval_figure`. neighbours.png: held-out images drawn
    with `seed` (`report.spread_queries`), half of seen classes and half of
    unseen ones when there are both, each beside its `report.NEIGHBOURS`
    nearest indexed images, wrong classes framed in red. embeddings.png:
    `report.plot_embeddings`.
    """
    report.plot_loss(output, records)
    figure = retrieval_figure(records, before, pixels)
    figure.savefig(output / "retrieval.png", dpi=100)
    _plot_neighbours(output / "neighbours.png", index, test_embeddings, data, train_classes, seed)
    report.plot_embeddings(
        output / "embeddings.png", test_embeddings, data.y_test, data.class_names
    )


def neighbour_queries(labels: np.ndarray, train_classes: int, seed: int) -> tuple[np.ndarray, int]:
    """`report.NEIGHBOUR_QUERIES` test rows, half of seen classes then half of unseen if both.

    Returns the rows and how many of them, first, are of seen classes.
    """
    labels = np.asarray(labels)
    seen = np.flatnonzero(labels < train_classes)
    unseen = np.flatnonzero(labels >= train_classes)
    if len(seen) == 0 or len(unseen) == 0:
        rows = report.spread_queries(labels, report.NEIGHBOUR_QUERIES, seed)
        return rows, (len(rows) if len(seen) else 0)
    half = report.NEIGHBOUR_QUERIES // 2
    seen_rows = seen[report.spread_queries(labels[seen], half, seed)]
    unseen_rows = unseen[report.spread_queries(labels[unseen], half, seed)]
    return np.concatenate([seen_rows, unseen_rows]), len(seen_rows)


def _plot_neighbours(
    path: Path,
    index: Indexer,
    test_embeddings: np.ndarray,
    data: ImageData,
    train_classes: int,
    seed: int,
) -> None:
    rows, seen = neighbour_queries(data.y_test, train_classes, seed)
    if 0 < seen < len(rows):
        note = f"rows 1-{seen}: classes trained on; rows {seen + 1}-{len(rows)}: unseen classes"
    else:
        note = "classes trained on" if seen else "unseen classes"
    k = min(report.NEIGHBOURS, index.size())
    # The run's index is an exact search (`retrieval.build_index`): k neighbours for each.
    lookups = index.batch_lookup(np.asarray(test_embeddings)[rows], k=k)
    report.plot_neighbours(
        path,
        data.x_test[rows],
        data.y_test[rows],
        np.stack([np.stack([np.asarray(n.data) for n in found]) for found in lookups]),
        np.array([[int(n.label) for n in found] for found in lookups]),
        np.array([[float(n.distance) for n in found] for found in lookups]),
        data.class_names,
        among="indexed images",
        note=note,
    )
