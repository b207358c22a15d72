"""What a `tfsim` run reports: history.json, TensorBoard scalars, the summary table, plots."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from matplotlib.figure import Figure

from tensorflow_similarity.cli.devices import DevicePlan
from tensorflow_similarity.cli.parser import RUN_OPTIONS


def write_json(path: Path, value: Any) -> None:
    """Writes `value` to `path` as JSON, atomically (a reader never sees half a file)."""
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(value, indent=2, default=_plain))
    temporary.replace(path)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


class EpochTimer(keras.callbacks.Callback):
    """Times each epoch's training (before the kNN evaluation that follows it)."""

    def __init__(self, images_per_epoch: int) -> None:
        super().__init__()
        self.images_per_epoch = images_per_epoch
        self.seconds: dict[int, float] = {}
        self._start = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.seconds[epoch] = time.perf_counter() - self._start


class HistoryWriter(keras.callbacks.Callback):
    """Keeps one record per completed epoch and rewrites `history.json` after each.

    Args:
        path: The file to write, or `None` (a worker that is not the chief).
        records: The records of the epochs completed before a resume.
        knn_before: kNN accuracy before training.
        timer: The `EpochTimer` of the run.
        knn_augmented_before: kNN accuracy of the augmented test queries
            before training, or `None` (not measured). Defaults to `None`.
    """

    def __init__(
        self,
        path: Path | None,
        records: list[dict[str, Any]],
        knn_before: float,
        timer: EpochTimer,
        knn_augmented_before: float | None = None,
    ) -> None:
        super().__init__()
        self.path = path
        self.records = list(records)
        self.knn_before = knn_before
        self.timer = timer
        self.knn_augmented_before = knn_augmented_before

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        seconds = self.timer.seconds.get(epoch, float("nan"))
        record = {"epoch": epoch + 1}
        record.update({key: float(value) for key, value in (logs or {}).items()})
        record["seconds"] = seconds
        record["images_per_second"] = self.timer.images_per_epoch / seconds
        # A resumed run restarts at the backup's epoch: later records are replaced.
        self.records = self.records[:epoch] + [record]
        if self.path is not None:
            before = {"knn_accuracy_before": self.knn_before}
            if self.knn_augmented_before is not None:
                before["knn_accuracy_augmented_before"] = self.knn_augmented_before
            write_json(self.path, {**before, "epochs": self.records})


class ScalarLogger(keras.callbacks.Callback):
    """Writes each epoch's logs as TensorBoard scalars.

    `keras.callbacks.TensorBoard` needs the `tensorboard` package for
    `tf.summary.scalar`; `tf.summary.write` with the scalars plugin's metadata
    is core TensorFlow and gives TensorBoard the same curves.

    Args:
        log_dir: The folder of the event file.
    """

    def __init__(self, log_dir: Path) -> None:
        super().__init__()
        self.log_dir = log_dir
        self._writer = None

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(self.log_dir))
        metadata = tf.compat.v1.SummaryMetadata()
        metadata.plugin_data.plugin_name = "scalars"
        with self._writer.as_default():
            for name, value in (logs or {}).items():
                tf.summary.write(
                    f"epoch_{name}", tf.constant(float(value)), step=epoch, metadata=metadata
                )
        self._writer.flush()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self._writer is not None:
            self._writer.close()


def describe_batch_norm(args: argparse.Namespace, replicas: int) -> str:
    """Says how batch norm is synchronised, for the first line and the table."""
    if not args.sync_bn:
        return "per replica (not synchronised)"
    if args.sync_group_size and args.sync_group_size < replicas:
        return f"synchronised in groups of {args.sync_group_size} replicas"
    return f"synchronised over all {replicas} replicas"


def _steady(values: list[float]) -> float:
    # The first epoch also builds the graph; leave it out when there are others.
    values = values[1:] if len(values) > 1 else values
    return sum(values) / len(values)


def run_figures(
    args: argparse.Namespace,
    plan: DevicePlan,
    records: list[dict[str, Any]],
    batch_norm: str,
) -> dict[str, Any]:
    """Returns the part of a summary both jobs share: speed, epochs, devices, batch norm."""
    return {
        "images_per_second": _steady([r["images_per_second"] for r in records]),
        "seconds_per_epoch": _steady([r["seconds"] for r in records]),
        "epochs": len(records),
        "replicas": plan.replicas,
        "strategy": args.strategy,
        "batch_norm": batch_norm,
        "sync_bn": bool(args.sync_bn),
        "deterministic": bool(args.deterministic),
    }


def write_run_file(output: Path, args: argparse.Namespace, plan: DevicePlan, **extra: Any) -> None:
    """Writes `run.json`: the run options (what `--resume` continues), devices, `extra`."""
    write_json(
        output / "run.json",
        {
            "options": {key: getattr(args, key) for key in RUN_OPTIONS},
            "deterministic": args.deterministic,
            "devices": plan.as_dict(),
            **extra,
        },
    )


def summary(
    args: argparse.Namespace,
    plan: DevicePlan,
    records: list[dict[str, Any]],
    knn_before: float,
    batch_norm: str,
    knn_augmented_before: float | None = None,
    knn_pixels: float | None = None,
) -> dict[str, Any]:
    """Returns the run's summary (summary.json, and the rows of `table`).

    `knn_accuracy_augmented_before`/`_after` (when `knn_augmented_before` is
    given) are the kNN accuracies of the augmented test queries
    (`fitting.augmented_queries`) against the clean training images;
    `knn_accuracy_pixels` (when `knn_pixels` is given) that of the raw pixels.
    """
    augmented = {}
    if knn_augmented_before is not None:
        augmented = {
            "knn_accuracy_augmented_before": knn_augmented_before,
            "knn_accuracy_augmented_after": records[-1].get("knn_accuracy_augmented"),
        }
    pixels = {} if knn_pixels is None else {"knn_accuracy_pixels": knn_pixels}
    return {
        "knn_accuracy_before": knn_before,
        "knn_accuracy_after": records[-1].get("knn_accuracy"),
        **pixels,
        **augmented,
        **run_figures(args, plan, records, batch_norm),
    }


def table(summary: dict[str, Any]) -> str:
    """Returns `summary` as the table printed at the end of a run."""
    rows = [
        ("kNN accuracy before training", f"{summary['knn_accuracy_before']:.3f}"),
        ("kNN accuracy after training", f"{summary['knn_accuracy_after']:.3f}"),
    ]
    if summary.get("knn_accuracy_pixels") is not None:
        rows.append(("kNN accuracy of the raw pixels", f"{summary['knn_accuracy_pixels']:.3f}"))
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


def plot_loss(output: Path, records: list[dict[str, Any]]) -> None:
    """Writes loss.png: the training loss per epoch (a `Figure`, no pyplot)."""
    epochs = [r["epoch"] for r in records]
    figure = Figure(figsize=(5, 3.5))
    axis = figure.subplots()
    axis.plot(epochs, [r["loss"] for r in records], marker="o")
    axis.set(xlabel="epoch", ylabel="loss", title="Training loss")
    figure.tight_layout()
    figure.savefig(output / "loss.png", dpi=100)


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
    epochs = [r["epoch"] for r in records]
    plot_loss(output, records)

    figure = Figure(figsize=(5, 3.5))
    axis = figure.subplots()
    axis.plot(
        [0, *epochs],
        [knn_before] + [r.get("knn_accuracy") for r in records],
        marker="o",
        label="clean test queries",
    )
    if knn_augmented_before is not None:
        axis.plot(
            [0, *epochs],
            [knn_augmented_before] + [r.get("knn_accuracy_augmented") for r in records],
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
