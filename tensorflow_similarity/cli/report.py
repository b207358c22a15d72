"""What a `tfsim` run reports: history.json, TensorBoard scalars, the summary table, plots."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf
from matplotlib.figure import Figure

from tensorflow_similarity.cli.devices import DevicePlan
from tensorflow_similarity.cli.options import RUN_OPTIONS


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
