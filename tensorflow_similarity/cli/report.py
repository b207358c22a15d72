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
from matplotlib.ticker import MaxNLocator

from tensorflow_similarity.cli.devices import DevicePlan
from tensorflow_similarity.cli.options import RUN_OPTIONS
from tensorflow_similarity.visualization import plot_neighbors_grid, project_embeddings

# neighbours.png: this many held-out queries, each beside this many nearest neighbours.
NEIGHBOUR_QUERIES = 8
NEIGHBOURS = 5
# embeddings.png: the classes with the most test images, as many as tab10 tells apart.
EMBEDDING_CLASSES = 10


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

    history.json: the figures before training (`before`'s entries), then
    `"epochs"`, one record per epoch: its logs (loss and the job's figures),
    seconds and images per second.

    Args:
        path: The file to write, or `None` (a worker that is not the chief).
        records: The records of the epochs completed before a resume.
        before: The job's figures before training, as history.json holds them.
        timer: The `EpochTimer` of the run.
    """

    def __init__(
        self,
        path: Path | None,
        records: list[dict[str, Any]],
        before: dict[str, Any],
        timer: EpochTimer,
    ) -> None:
        super().__init__()
        self.path = path
        self.records = list(records)
        self.before = before
        self.timer = timer

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        seconds = self.timer.seconds.get(epoch, float("nan"))
        record = {"epoch": epoch + 1}
        record.update({key: float(value) for key, value in (logs or {}).items()})
        record["seconds"] = seconds
        record["images_per_second"] = self.timer.images_per_epoch / seconds
        # A resumed run restarts at the backup's epoch: later records are replaced.
        self.records = self.records[:epoch] + [record]
        if self.path is not None:
            write_json(self.path, {**self.before, "epochs": self.records})


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


def plot_loss(output: Path, records: list[dict[str, Any]]) -> None:
    """Writes loss.png: the training loss per epoch (a `Figure`, no pyplot)."""
    epochs = [r["epoch"] for r in records]
    figure = Figure(figsize=(5, 3.5))
    axis = figure.subplots()
    axis.plot(epochs, [r["loss"] for r in records], marker="o")
    axis.set(xlabel="epoch", ylabel="loss", title="Training loss")
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.tight_layout()
    figure.savefig(output / "loss.png", dpi=100)


def evaluated_curve(
    records: list[dict[str, Any]], key: str, before: float
) -> tuple[list[int], list[float]]:
    """The epochs (0: before training) and values of a figure, for the epochs evaluated.

    With `--eval-every N`, the other epochs' records have no `key`.
    """
    points = [(r["epoch"], r[key]) for r in records if r.get(key) is not None]
    return [0, *(e for e, _ in points)], [before, *(v for _, v in points)]


def spread_queries(labels: np.ndarray, count: int, seed: int) -> np.ndarray:
    """Rows of `count` images drawn with `seed`, one per class before any class has two.

    The classes are taken in a seeded random order and one random image of
    each is drawn in turn, round after round, so the queries spread over as
    many classes as `count` allows. Fewer rows come back only when there are
    fewer than `count` images.
    """
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    classes = rng.permutation(np.unique(labels))
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in classes]
    rows: list[int] = []
    while len(rows) < count and any(pools):
        for pool in pools:
            if pool and len(rows) < count:
                rows.append(int(pool.pop(0)))
    return np.asarray(rows, dtype=np.int64)


def plot_neighbours(
    path: Path,
    query_images: np.ndarray,
    query_labels: np.ndarray,
    neighbour_images: np.ndarray,
    neighbour_labels: np.ndarray,
    distances: np.ndarray,
    class_names: list[str],
    among: str,
    note: str = "",
) -> None:
    """Writes neighbours.png: each query beside its nearest neighbours, wrong ones in red.

    `among` says where the neighbours were searched, and `note` (a line
    added when not empty) anything else the title should say
    (`visualization.plot_neighbors_grid` draws the figure).
    """
    wrong = int(np.sum(np.asarray(neighbour_labels) != np.asarray(query_labels)[:, None]))
    shape = np.shape(neighbour_labels)
    figure, _ = plot_neighbors_grid(
        query_images,
        query_labels,
        neighbour_images,
        neighbour_labels,
        class_names=class_names,
        neighbor_distances=distances,
        title=(
            f"{shape[0]} held-out queries and their {shape[1]} nearest {among} (cosine "
            f"distance);\nred frame and \u2717: another class ({wrong} of {shape[0] * shape[1]})"
            + (f"\n{note}" if note else "")
        ),
    )
    figure.savefig(path, dpi=100)


def plot_embeddings(
    path: Path, embeddings: np.ndarray, labels: np.ndarray, class_names: list[str]
) -> None:
    """Writes embeddings.png: `embeddings_figure`."""
    embeddings_figure(embeddings, labels, class_names).savefig(path, dpi=100)


def embeddings_figure(embeddings: np.ndarray, labels: np.ndarray, class_names: list[str]) -> Figure:
    """A 2-D PCA of the test embeddings of the classes with the most test images.

    Ten colours tell ten classes apart: with more classes, only the
    `EMBEDDING_CLASSES` with the most test images (ties: the lower class)
    are projected and drawn, and the title says how many of how many.
    """
    labels = np.asarray(labels)
    classes, counts = np.unique(labels, return_counts=True)
    # Most images first; a stable sort keeps the lower class first among equal counts.
    shown = classes[np.argsort(-counts, kind="stable")][:EMBEDDING_CLASSES]
    mask = np.isin(labels, shown)
    flat = np.asarray(embeddings, np.float64).reshape(len(labels), -1)[mask]
    points = project_embeddings(flat) if len(flat) >= 2 else np.zeros((len(flat), 2))
    figure = Figure(figsize=(6.5, 4.5))
    axis = figure.subplots()
    for colour, label in enumerate(sorted(shown.tolist())):
        of_class = labels[mask] == label
        axis.scatter(
            points[of_class, 0],
            points[of_class, 1],
            color=f"C{colour}",
            s=14,
            label=class_names[label],
        )
    axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5), markerscale=0.8)
    if len(shown) < len(classes):
        title = (
            f"Test embeddings (PCA) of the {len(shown)} of {len(classes)} classes\n"
            "with the most test images"
        )
    else:
        title = f"Test embeddings (PCA), all {len(classes)} classes"
    axis.set(title=title, xlabel="PC 1", ylabel="PC 2")
    figure.tight_layout()
    return figure
