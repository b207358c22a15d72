"""What a metric-learning `tfsim` run reports: its first line, summary table and plots.

history.json, TensorBoard's scalars and loss.png are every run's (`report`).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

import matplotlib.image
import numpy as np
from matplotlib import pyplot as plt
from matplotlib.figure import Figure

from tensorflow_similarity.cli import report
from tensorflow_similarity.cli.devices import DevicePlan
from tensorflow_similarity.cli.retrieval import FIGURES, GROUPS, figure_name
from tensorflow_similarity.datasets import ImageData
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.visualization import projector, viz_neighbors_imgs

# Queries drawn in neighbours.png: the first test images of this many seen and unseen classes.
NEIGHBOUR_QUERIES = 2
NEIGHBOURS = 5
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


def plot(
    output: Path,
    records: list[dict[str, Any]],
    before: dict[str, float],
    index: Indexer,
    test_embeddings: np.ndarray,
    data: ImageData,
    train_classes: int,
) -> None:
    """Writes loss.png, retrieval.png, neighbours.png and embeddings.png to `output`.

    neighbours.png: for the first test images of a few seen and unseen
    classes, their nearest indexed images (`visualization.viz_neighbors_imgs`,
    wrong classes in red); embeddings.png: a 2-D PCA of the test embeddings
    (`visualization.projector`).
    """
    report.plot_loss(output, records)

    figure = Figure(figsize=(6, 4))
    axis = figure.subplots()
    for key in before:
        epochs, values = report.evaluated_curve(records, key, before[key])
        axis.plot(epochs, values, marker="o", label=key.replace("_", " "))
    axis.set(xlabel="epoch (0: before training)", ylabel="test images", title="Retrieval")
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(output / "retrieval.png", dpi=100)

    _plot_neighbours(output / "neighbours.png", index, test_embeddings, data, train_classes)
    names = dict(enumerate(data.class_names))
    figure, _ = projector(
        test_embeddings, data.y_test, names, title="Test embeddings (PCA)", show=False
    )
    figure.savefig(output / "embeddings.png", dpi=100)
    plt.close(figure)


def _plot_neighbours(
    path: Path, index: Indexer, test_embeddings: np.ndarray, data: ImageData, train_classes: int
) -> None:
    firsts = {}
    for row, label in enumerate(data.y_test.tolist()):
        firsts.setdefault(label, row)
    seen = [firsts[c] for c in sorted(firsts) if c < train_classes][:NEIGHBOUR_QUERIES]
    unseen = [firsts[c] for c in sorted(firsts) if c >= train_classes][:NEIGHBOUR_QUERIES]
    k = min(NEIGHBOURS, index.size())
    names = dict(enumerate(data.class_names))
    strips = []
    for query in seen + unseen:
        neighbours = index.single_lookup(test_embeddings[query], k=k)
        figure, _ = viz_neighbors_imgs(
            data.x_test[query],
            int(data.y_test[query]),
            neighbours,
            names,
            fig_size=(2 * (k + 1), 2.4),
            show=False,
        )
        # One figure per query (the module draws one row each), stacked into one image.
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=60)
        plt.close(figure)
        buffer.seek(0)
        strips.append(matplotlib.image.imread(buffer, format="png"))
    width = max(strip.shape[1] for strip in strips)
    padded = [
        np.pad(strip, ((0, 0), (0, width - strip.shape[1]), (0, 0)), constant_values=1.0)
        for strip in strips
    ]
    matplotlib.image.imsave(path, np.concatenate(padded, axis=0))
