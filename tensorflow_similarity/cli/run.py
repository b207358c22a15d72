"""One training run of `tfsim`: the skeleton both jobs share, and the `Job` each fills in.

`run` owns what every run does, in this order: the seed and TensorFlow's op
determinism, the strategy and this worker's folder, the backup (deleted for
a new run, restored by `--resume`), the history of the epochs before a
resume, the figures before training, run.json, the `fit` call with tfsim's
callbacks, then (chief only) the model, summary.json, the plots and the
record that the run finished, and last the backup's deletion. Ctrl-C (or
SIGTERM, as `command.main` maps it) during training or writing ends it with
`EXIT_INTERRUPTED` and keeps what was written; under `--strategy
multi-worker`, a task of the cluster lost during training ends the others with
`EXIT_CLUSTER`, their backups kept (`cluster.report_lost_task`).

A `Job` supplies only what differs: its model, its batches, its evaluation
callbacks and figures before training, its lines, its saved model, summary
and plots (`pretrain.PretrainJob`, `metric.MetricJob`).
"""

from __future__ import annotations

import abc
import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity.callbacks import BatchNormStatistics, EpochBackup
from tensorflow_similarity.cli import cluster, devices, report, run_folder
from tensorflow_similarity.cli.devices import DevicePlan, is_chief, make_strategy, task_index
from tensorflow_similarity.cli.disk_full import disk_full_is_usage_error
from tensorflow_similarity.cli.errors import EXIT_INTERRUPTED, TrainingDiverged, UsageError
from tensorflow_similarity.cli.fitting import (
    EvaluationSchedule,
    fit_epochs,
    resolved_learning_rate,
)
from tensorflow_similarity.datasets import ImageData


class Job(abc.ABC):
    """What one kind of `tfsim` run adds to the skeleton `run` owns.

    A job is made once its options are checked and its data loaded; it
    draws no random number before `run` seeds the run.

    Args:
        args: The checked options.
        plan: The devices, already configured.
        data: The training and test images.
    """

    def __init__(self, args: argparse.Namespace, plan: DevicePlan, data: ImageData) -> None:
        self.args = args
        self.plan = plan
        self.data = data

    @staticmethod
    @abc.abstractmethod
    def check_data(args: argparse.Namespace, data: ImageData) -> None:
        """Raises `UsageError` if the loaded data do not fit the options (before any model)."""

    @property
    @abc.abstractmethod
    def train_images(self) -> np.ndarray:
        """The clean images training draws its batches from.

        An epoch is `len(train_images) // batch_size` steps, and batch norm's
        statistics are recomputed from them at each epoch's end.
        """

    @property
    @abc.abstractmethod
    def network(self) -> keras.Model:
        """The network whose batch norm statistics are recomputed after each epoch."""

    @abc.abstractmethod
    def build(self, steps_per_epoch: int) -> keras.Model:
        """Builds and compiles the job's models; returns the one `fit` trains.

        Called in the strategy's scope. The returned model is built, so that a
        backup can be loaded into it.
        """

    @abc.abstractmethod
    def batches(self, first_epoch: int, steps_per_epoch: int) -> tf.data.Dataset:
        """The training batches from epoch `first_epoch` on; batch `n` a function of `(seed, n)`."""

    @abc.abstractmethod
    def evaluations(self) -> list[keras.callbacks.Callback]:
        """The callbacks that add the job's figures to each epoch's logs (after `batches`)."""

    @abc.abstractmethod
    def figures_before(self, saved: dict[str, Any]) -> dict[str, Any]:
        """The figures before training, as history.json holds them.

        Args:
            saved: The interrupted run's history.json when resuming (its
                figures are taken rather than measured again), else `{}`.
        """

    def run_file_extra(self) -> dict[str, Any]:
        """Entries run.json holds beside the options and devices. Defaults to none."""
        return {}

    @abc.abstractmethod
    def first_line(self, before: dict[str, Any], batch_norm: str) -> str:
        """The line printed before training."""

    @abc.abstractmethod
    def save(self, output: Path) -> None:
        """Saves the trained model (and what goes with it) to `output` (chief only)."""

    @abc.abstractmethod
    def summary(self, records: list[dict[str, Any]], before: dict[str, Any]) -> dict[str, Any]:
        """The job's figures in the run's summary (summary.json, and the rows of `table`).

        `run` adds the speed, epochs, devices and batch norm (`report.run_figures`).
        """

    @abc.abstractmethod
    def plot(self, output: Path, records: list[dict[str, Any]], before: dict[str, Any]) -> None:
        """Writes the job's plots to `output` (chief only)."""

    @abc.abstractmethod
    def table(self, summary: dict[str, Any]) -> str:
        """The summary as the table printed at the end."""

    @abc.abstractmethod
    def last_line(self, output: Path) -> str:
        """The line printed last: what was written, and what to do next."""


def start(
    job: Job,
    output: Path,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    data_fingerprint: dict[str, Any] | None = None,
) -> int:
    """Runs `job` once every check has passed; with `--overwrite`, deletes the old run first.

    Args:
        job: The job, with its checked options, devices and data.
        output: The run's folder.
        callbacks: More Keras callbacks (see `run`).
        data_fingerprint: The data's fingerprint, recorded in run.json
            (`data_fingerprint.data_fingerprint`). Defaults to none.

    Returns:
        `run`'s exit status, or `errors.EXIT_DIVERGED` if training diverged.
    """
    args = job.args
    chief = devices.is_chief_process(args.strategy)
    if args.overwrite:
        run_folder.clear(output if chief else output / f"worker-{devices.task_index()}")
    try:
        return run(job, output, callbacks, data_fingerprint)
    except TrainingDiverged as error:
        return run_folder.report_divergence(output, error, chief)


def run(
    job: Job,
    output: Path,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    data_fingerprint: dict[str, Any] | None = None,
) -> int:
    """Trains, evaluates and writes the outputs of one run of `job`.

    Args:
        job: The job, with its checked options, devices and data.
        output: The run's folder.
        callbacks: More Keras callbacks, run after tfsim's own (the backup
            of an epoch is written before they see its end).
        data_fingerprint: Recorded in run.json as `"data"`, which
            `--resume` compares. Defaults to none.

    Returns:
        The exit status: 0, `EXIT_INTERRUPTED` on `KeyboardInterrupt`
        during training or writing, or `EXIT_CLUSTER` when a multi-worker
        run lost a task of its cluster.

    Raises:
        UsageError: If the model cannot be built from the options, or
            training ran no epoch.
        TrainingDiverged: At the first non-finite loss or weight.
    """
    args, plan = job.args, job.plan
    keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    strategy = make_strategy(args.strategy, plan, args.worker_timeout)
    chief = is_chief(strategy)
    worker_dir = output if chief else output / f"worker-{task_index()}"
    worker_dir.mkdir(parents=True, exist_ok=True)
    steps_per_epoch = len(job.train_images) // args.batch_size
    backup = EpochBackup(worker_dir / "backup", steps_per_epoch)
    if not args.resume and backup.backup_dir.exists():
        shutil.rmtree(backup.backup_dir)
    try:
        with strategy.scope():
            trainer = job.build(steps_per_epoch)
            first_epoch = backup.restore(trainer) if args.resume else 0
    except ValueError as error:
        raise UsageError(str(error)) from None

    dataset = job.batches(first_epoch, steps_per_epoch)
    evaluations = job.evaluations()
    history_file = output / "history.json"
    records: list[dict[str, Any]] = []
    saved: dict[str, Any] = {}
    if args.resume and history_file.is_file():
        saved = json.loads(history_file.read_text())
        # History is written before the backup: it may hold one epoch more than the backup.
        records = saved.get("epochs", [])[:first_epoch]
    before = job.figures_before(saved)
    if chief:
        extra = {"data": data_fingerprint} if data_fingerprint is not None else {}
        extra["resolved_learning_rate"] = resolved_learning_rate(args)
        report.write_run_file(output, args, plan, **extra, **job.run_file_extra())

    timer = report.EpochTimer(steps_per_epoch * args.batch_size)
    recorder = report.HistoryWriter(history_file if chief else None, records, before, timer)
    batch_norm = report.describe_batch_norm(args, plan.replicas)
    if chief:
        print(job.first_line(before, batch_norm), flush=True)
    # The backup of each epoch is the write a full disk fails first.
    cluster_option = " --strategy multi-worker" if args.strategy == "multi-worker" else ""
    resume = f"tfsim {args.command}{cluster_option} --output {output} --resume"
    try:
        with disk_full_is_usage_error(backup.backup_dir, then=resume):
            fit_epochs(
                trainer,
                dataset,
                args,
                first_epoch,
                steps_per_epoch,
                [
                    timer,
                    EvaluationSchedule(
                        [BatchNormStatistics(job.network, job.train_images), *evaluations],
                        args.eval_every,
                        args.epochs,
                    ),
                    recorder,
                    report.ScalarLogger(worker_dir / "logs" / "train"),
                    backup,
                    *callbacks,
                ],
                chief,
            )
        if not recorder.records:
            raise UsageError("training ran no epoch; nothing to report.")
        if chief:
            job.save(output)
            summary = {
                **job.summary(recorder.records, before),
                **report.run_figures(args, plan, recorder.records, batch_norm),
            }
            report.write_json(output / "summary.json", summary)
            job.plot(output, recorder.records, before)
            run_folder.finish(output)
        # Last: an interruption before this point can still be resumed.
        shutil.rmtree(backup.backup_dir, ignore_errors=True)
    except KeyboardInterrupt:
        run_folder.print_interrupted(output, backup.epochs_saved)
        return EXIT_INTERRUPTED
    except tf.errors.OpError as error:
        if args.strategy != "multi-worker" or not cluster.is_peer_failure(error):
            raise
        return cluster.report_lost_task(error, args.command, str(output), backup.epochs_saved)
    if chief:
        print(job.table(summary))
        print(job.last_line(output))
    return 0
