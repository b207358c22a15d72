"""What a self-supervised `tfsim` run reports: its summary table and plots.

history.json, TensorBoard's scalars and loss.png are every run's (`report`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tensorflow_similarity.cli import report
from tensorflow_similarity.evaluators.linear_probe import DEFAULT_LEARNING_RATES

# The linear probe's protocol in a run: `linear_probe_on_features`' defaults, top-1 only, so
# that a run's figures compare with `evaluators.linear_probe`'s. Its three probes cost seconds
# beside a run's minutes of training, most of it the raw pixels' (the widest features).
LINEAR_PROBE_PROTOCOL = {
    "epochs": 100,
    "learning_rates": list(DEFAULT_LEARNING_RATES),
    "validation_fraction": 0.2,
}


def summary(
    records: list[dict[str, Any]],
    before: dict[str, float],
    knn_pixels: float,
    linear_after: float | None = None,
    linear_pixels: float | None = None,
) -> dict[str, Any]:
    """Returns the job's part of the run's summary (summary.json, and the rows of `table`).

    `knn_accuracy_augmented_before`/`_after` are the kNN accuracies of the
    augmented test queries (`fitting.augmented_queries`) against the clean
    training images; `knn_accuracy_pixels` that of the raw pixels.
    `linear_accuracy_before`/`_after`/`_pixels` are the linear-probe top-1
    accuracies of the same features on the same splits (`None` where the
    data cannot hold a probe, see `pretrain.linear_probe_accuracy`), and
    `linear_probe` the protocol they were measured with. `run.run` adds
    `report.run_figures`.

    Args:
        records: The epochs' records.
        before: The figures before training, as history.json holds them.
        knn_pixels: The raw pixels' kNN accuracy.
        linear_after: The trained backbone's linear-probe accuracy. Defaults
            to `None`.
        linear_pixels: The raw pixels' linear-probe accuracy. Defaults to
            `None`.
    """
    return {
        "knn_accuracy_before": before["knn_accuracy_before"],
        "knn_accuracy_after": records[-1].get("knn_accuracy"),
        "knn_accuracy_pixels": knn_pixels,
        "knn_accuracy_augmented_before": before["knn_accuracy_augmented_before"],
        "knn_accuracy_augmented_after": records[-1].get("knn_accuracy_augmented"),
        "linear_accuracy_before": before.get("linear_accuracy_before"),
        "linear_accuracy_after": linear_after,
        "linear_accuracy_pixels": linear_pixels,
        "linear_probe": LINEAR_PROBE_PROTOCOL,
    }


def accuracy_text(value: float | None) -> str:
    """An accuracy as the lines and the table print it: three decimals, or `n/a` for `None`."""
    return "n/a" if value is None else f"{value:.3f}"


def table(summary: dict[str, Any]) -> str:
    """Returns `summary` as the table printed at the end of a run."""
    rows = [
        ("kNN accuracy before training", f"{summary['knn_accuracy_before']:.3f}"),
        ("kNN accuracy after training", f"{summary['knn_accuracy_after']:.3f}"),
    ]
    if summary.get("knn_accuracy_pixels") is not None:
        rows.append(("kNN accuracy of the raw pixels", f"{summary['knn_accuracy_pixels']:.3f}"))
    if "linear_accuracy_after" in summary:
        rows += [
            (
                "linear-probe accuracy before training",
                accuracy_text(summary["linear_accuracy_before"]),
            ),
            (
                "linear-probe accuracy after training",
                accuracy_text(summary["linear_accuracy_after"]),
            ),
            (
                "linear-probe accuracy of the raw pixels",
                accuracy_text(summary["linear_accuracy_pixels"]),
            ),
        ]
    if summary.get("knn_accuracy_augmented_after") is not None:
        rows += [
            (
                "kNN accuracy, augmented queries, before",
                f"{summary['knn_accuracy_augmented_before']:.3f}",
            ),
            (
                "kNN accuracy, augmented queries, after",
                f"{summary['knn_accuracy_augmented_after']:.3f}",
            ),
        ]
    rows += [
        ("images per second (training)", f"{summary['images_per_second']:.1f}"),
        ("seconds per epoch (training)", f"{summary['seconds_per_epoch']:.1f}"),
        ("epochs", str(summary["epochs"])),
        ("replicas", f"{summary['replicas']} ({summary['strategy']})"),
        ("batch norm", summary["batch_norm"]),
    ]
    width = max(len(name) for name, _ in rows)
    value_width = max(len(value) for _, value in rows)
    rule = f"+-{'-' * width}-+-{'-' * value_width}-+"
    lines = [rule] + [f"| {n.ljust(width)} | {v.ljust(value_width)} |" for n, v in rows] + [rule]
    return "\n".join(lines)


def nearest_held_out(
    embeddings: np.ndarray, rows: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The `k` nearest held-out images of each query row, by cosine, the query left out.

    The kNN accuracy's similarity (cosine), in float64; equal distances keep
    the lower row first.

    Args:
        embeddings: `[n, ...]` embeddings of the held-out images.
        rows: The queries' rows in `embeddings`.
        k: Neighbours per query; at most `n - 1`.

    Returns:
        `(neighbours, distances)`: `[len(rows), k]` rows, nearest first, and
        their cosine distances (1 - cosine similarity).
    """
    flat = np.asarray(embeddings, np.float64).reshape(len(embeddings), -1)
    unit = flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)
    distances = 1.0 - unit[rows] @ unit.T
    # The query is its own nearest image: it cannot be its own neighbour.
    distances[np.arange(len(rows)), rows] = np.inf
    nearest = np.argsort(distances, axis=1, kind="stable")[:, :k]
    return nearest, np.take_along_axis(distances, nearest, axis=1)


def knn_figure(
    records: list[dict[str, Any]],
    knn_before: float,
    knn_pixels: float | None,
    knn_augmented_before: float | None = None,
) -> Figure:
    """The kNN accuracy by epoch (0: before training), beside the raw pixels' line.

    The clean test queries' curve; the augmented queries' one when
    `knn_augmented_before` is given; and the raw pixels' kNN accuracy (what
    the final table prints) as a dashed horizontal line, when given.
    """
    figure = Figure(figsize=(5.5, 4.2))
    axis = figure.subplots()
    axis.plot(
        *report.evaluated_curve(records, "knn_accuracy", knn_before),
        marker="o",
        label="clean test queries",
    )
    if knn_augmented_before is not None:
        axis.plot(
            *report.evaluated_curve(records, "knn_accuracy_augmented", knn_augmented_before),
            marker="s",
            label="augmented test queries",
        )
    if knn_pixels is not None:
        axis.axhline(
            knn_pixels,
            color="grey",
            linestyle="--",
            label=f"raw pixels, clean queries ({knn_pixels:.3f})",
        )
    # Below the axes: inside, it would hide the curves or the raw pixels' line at the top.
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    axis.set(xlabel="epoch (0: before training)", ylabel="kNN accuracy", title="kNN accuracy")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.tight_layout()
    return figure


def plot(
    output: Path,
    records: list[dict[str, Any]],
    knn_before: float,
    knn_pixels: float | None,
    images: np.ndarray,
    embeddings: Any,
    labels: Any,
    class_names: list[str],
    seed: int,
    knn_augmented_before: float | None = None,
) -> None:
    """Writes loss.png, knn_accuracy.png, neighbours.png and embeddings.png to `output`.

    knn_accuracy.png: `knn_figure`. neighbours.png: `report.NEIGHBOUR_QUERIES`
    held-out images drawn with `seed` (`report.spread_queries`), each beside
    its `report.NEIGHBOURS` nearest held-out images (`nearest_held_out`),
    wrong classes framed in red. embeddings.png: `report.plot_embeddings`.

    Figures are made with `matplotlib.figure.Figure`, not pyplot, so that no
    GUI backend is chosen or needed.
    """
    report.plot_loss(output, records)
    figure = knn_figure(records, knn_before, knn_pixels, knn_augmented_before)
    figure.savefig(output / "knn_accuracy.png", dpi=100)

    labels = np.asarray(labels)
    rows = report.spread_queries(labels, report.NEIGHBOUR_QUERIES, seed)
    k = min(report.NEIGHBOURS, len(labels) - 1)
    if k >= 1:
        neighbours, distances = nearest_held_out(embeddings, rows, k)
        report.plot_neighbours(
            output / "neighbours.png",
            images[rows],
            labels[rows],
            images[neighbours],
            labels[neighbours],
            distances,
            class_names,
            among="held-out images",
        )
    else:
        warnings.warn(
            "tfsim: neighbours.png is not written: the held-out set has one image, which has "
            "no neighbour among the others. Hold out more images (--limit, more data).",
            UserWarning,
            stacklevel=2,
        )
    report.plot_embeddings(output / "embeddings.png", embeddings, labels, class_names)
