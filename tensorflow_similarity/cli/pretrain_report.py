"""What a self-supervised `tfsim` run reports: its summary table and plots.

history.json, TensorBoard's scalars and loss.png are every run's (`report`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

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


def plot(
    output: Path,
    records: list[dict[str, Any]],
    knn_before: float,
    embeddings: Any,
    labels: Any,
    class_names: list[str],
    knn_augmented_before: float | None = None,
) -> None:
    """Writes loss.png, knn_accuracy.png and embeddings.png (a 2-D PCA) to `output`.

    knn_accuracy.png has the clean test queries' curve and, when
    `knn_augmented_before` is given, the augmented queries' one.

    Figures are made with `matplotlib.figure.Figure`, not pyplot, so that no
    GUI backend is chosen or needed.
    """
    report.plot_loss(output, records)

    figure = Figure(figsize=(5, 3.5))
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
        axis.legend(fontsize=8, loc="best")
    axis.set(xlabel="epoch (0: before training)", ylabel="kNN accuracy", title="kNN accuracy")
    figure.tight_layout()
    figure.savefig(output / "knn_accuracy.png", dpi=100)

    embeddings = np.asarray(embeddings, np.float64).reshape(len(embeddings), -1)
    centred = embeddings - embeddings.mean(axis=0)
    # PCA by SVD: deterministic and fast, and needs no scikit-learn.
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    points = centred @ components[:2].T
    figure = Figure(figsize=(5.5, 4.5))
    axis = figure.subplots()
    scatter = axis.scatter(points[:, 0], points[:, 1], c=labels, cmap="tab10", s=8)
    handles, _ = scatter.legend_elements(num=None)
    present = sorted(set(np.asarray(labels).tolist()))
    if len(present) <= 20:
        axis.legend(
            handles, [class_names[i] for i in present], fontsize=7, loc="best", markerscale=0.8
        )
    axis.set(title="Test embeddings (PCA)", xlabel="PC 1", ylabel="PC 2")
    figure.tight_layout()
    figure.savefig(output / "embeddings.png", dpi=100)
