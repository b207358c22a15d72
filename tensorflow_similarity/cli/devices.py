"""Which devices a `tfsim` run trains on, decided before TensorFlow's runtime starts.

Logical CPU devices can only be configured before the runtime initialises, so
the plan is made from the physical devices and the options alone, and
`create_logical_cpus` runs before any tensor or strategy exists.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

import tensorflow as tf

from tensorflow_similarity.cli.cluster import cluster_tasks, read_tf_config, wait_for_cluster
from tensorflow_similarity.cli.defaults import DEFAULT_CPU_REPLICAS, DEFAULT_WORKER_TIMEOUT
from tensorflow_similarity.cli.errors import UsageError


@dataclass(frozen=True)
class DevicePlan:
    """The replicas of a run and the devices they run on.

    Attributes:
        replicas: Replicas in sync (over all workers).
        logical_cpus: Logical CPU devices to create, 0 for none.
        devices: The local devices of `MirroredStrategy` or
            `OneDeviceStrategy`, `None` for `MultiWorkerMirroredStrategy`.
        workers: Workers in the cluster.
    """

    replicas: int
    logical_cpus: int
    devices: list[str] | None
    workers: int

    def as_dict(self) -> dict[str, Any]:
        """Returns the plan as plain values, for run.json."""
        return asdict(self)


def plan_devices(strategy: str, replicas: int | None) -> DevicePlan:
    """Decides the devices of `--strategy` and `--replicas`.

    Args:
        strategy: One of `parser.STRATEGIES`.
        replicas: `--replicas`, or `None` for the default.

    Returns:
        A `DevicePlan`.

    Raises:
        UsageError: If `replicas` does not fit the strategy or the machine, or
            `TF_CONFIG` is malformed.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if strategy == "one-device":
        if replicas not in (None, 1):
            raise UsageError(
                f"--strategy one-device has one replica; got --replicas {replicas}. Use "
                "--strategy mirrored for several."
            )
        return DevicePlan(1, 0, ["/gpu:0" if gpus else "/cpu:0"], 1)
    if strategy == "multi-worker":
        if replicas is not None:
            raise UsageError(
                "--strategy multi-worker takes its replicas from TF_CONFIG (workers x local "
                "GPUs, or one CPU per worker); drop --replicas."
            )
        workers = _tf_config_workers()
        return DevicePlan(workers * max(len(gpus), 1), 0, None, workers)
    if gpus:
        replicas = replicas or len(gpus)
        if replicas > len(gpus):
            raise UsageError(
                f"--replicas {replicas} but only {len(gpus)} GPUs are visible; use at most "
                f"{len(gpus)}."
            )
        return DevicePlan(replicas, 0, [f"/gpu:{i}" for i in range(replicas)], 1)
    replicas = replicas or DEFAULT_CPU_REPLICAS
    return DevicePlan(replicas, replicas, [f"/cpu:{i}" for i in range(replicas)], 1)


def _tf_config_workers() -> int:
    config = read_tf_config()
    return 1 if config is None else len(config[0])


def check_replicas(args: argparse.Namespace, replicas: int) -> None:
    """Raises `UsageError` if the batch or the sync group does not fit `replicas`."""
    if args.batch_size < replicas:
        raise UsageError(
            f"--batch-size {args.batch_size} is smaller than the {replicas} replicas; each "
            f"replica needs at least one image. Use --batch-size {replicas} or more, or fewer "
            "replicas."
        )
    check_batch_divides(args.batch_size, replicas)
    group = args.sync_group_size
    if group is not None and replicas % group:
        raise UsageError(
            f"--sync-group-size {group} does not divide the {replicas} replicas; use a "
            f"divisor of {replicas}."
        )


def check_batch_divides(batch_size: int, replicas: int) -> None:
    """Raises `UsageError` unless `replicas` divide the global batch evenly.

    Keras' `fit` under a strategy gives each replica an equal share of every
    batch, so a remainder would fail inside training.
    """
    if batch_size % replicas:
        below = batch_size // replicas * replicas
        sizes = f"{below} or {below + replicas}" if below else str(replicas)
        raise UsageError(
            f"--batch-size {batch_size} does not divide evenly over the {replicas} replicas "
            f"(each replica takes an equal share of the batch). Use --batch-size {sizes}, or "
            "--replicas a divisor of the batch size."
        )


def create_logical_cpus(plan: DevicePlan) -> None:
    """Splits the first CPU into `plan.logical_cpus` devices (before the runtime starts)."""
    if plan.logical_cpus:
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * plan.logical_cpus
        )


def make_strategy(
    strategy: str, plan: DevicePlan, worker_timeout: float = DEFAULT_WORKER_TIMEOUT
) -> tf.distribute.Strategy:
    """Returns the `tf.distribute` strategy named by `--strategy` over `plan`'s devices.

    Under `multi-worker`, first waits at most `worker_timeout` seconds for
    the cluster's other tasks (`cluster.wait_for_cluster`).

    Raises:
        ClusterError: If the cluster did not form within `worker_timeout`.
    """
    if strategy == "one-device":
        return tf.distribute.OneDeviceStrategy(plan.devices[0])
    if strategy == "multi-worker":
        wait_for_cluster(worker_timeout)
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.MirroredStrategy(plan.devices)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's outputs (always, outside a cluster)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    return task_type == "chief" or (
        task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().jobs
    )


def is_chief_process(strategy: str) -> bool:
    """Whether this process writes the run's outputs, from `--strategy` and `TF_CONFIG`.

    `is_chief` before the strategy exists: the `chief` task, or worker 0 of a
    cluster without one; every process outside `--strategy multi-worker`.
    """
    if strategy != "multi-worker":
        return True
    config = read_tf_config()
    if config is None:
        return True
    tasks, own = config
    return own.job == "chief" or (
        own.job == "worker" and own.index == 0 and not any(t.job == "chief" for t in tasks)
    )


def task_index() -> int:
    """This worker's index in `TF_CONFIG`, 0 outside a cluster."""
    _, own = cluster_tasks()
    return own.index if own is not None else 0
