"""What the sections of `benchmark.sync_bn` share: settings, devices, timing, rendering.

Each section lives in its own module of `benchmark/sync_bn/` with a `measure` and
a `render` function; `run.py` runs the selected ones and assembles the report.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# Importing these creates no TensorFlow context, so the logical devices can
# still be configured by `configure_devices`.
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import markdown_table  # noqa: E402
from tensorflow_similarity.layers import SyncBatchNormalization  # noqa: E402

NUM_LOGICAL_DEVICES = 8
SECTIONS = ("collectives", "step_time", "robustness", "resnet", "multiworker", "floor")
# `ours` is the default layer, whose `exchange="auto"` is the constant-size "reduce"
# path on CPUs and GPUs; `ours_gather` forces the one-row-per-replica path (TPUs).
VARIANTS = ("plain", "keras", "ours", "ours_gather")
VARIANT_LABELS = {
    "plain": "plain `BatchNormalization`",
    "keras": "Keras `BatchNormalization(synchronized=True)`",
    "ours": "ours `SyncBatchNormalization`",
    "ours_gather": 'ours, `exchange="gather"`',
}
# The synchronised variants, and the two paths of ours.
SYNC_VARIANTS = VARIANTS[1:]
OURS_PATHS = ("ours", "ours_gather")
# The ResNet table adds ours with sync groups of two replicas.
RESNET_VARIANTS = (*VARIANTS, "ours_g2")
RESNET_VARIANT_LABELS = {**VARIANT_LABELS, "ours_g2": "ours, `group_size=2`"}


@dataclasses.dataclass(frozen=True)
class Setting:
    """One model/input size of the step-time table."""

    name: str
    image_size: int
    channels: int
    blocks: int
    batch_per_replica: int

    @property
    def num_batch_norm(self) -> int:
        return 1 + 2 * self.blocks


@dataclasses.dataclass(frozen=True)
class ResNetSetting:
    """One backbone of the ResNet step-time table."""

    name: str
    image_size: int
    batch_per_replica: int
    replica_counts: tuple[int, ...]


LATENCY_BOUND = Setting("latency-bound", image_size=8, channels=8, blocks=5, batch_per_replica=8)
COMPUTE_BOUND = Setting("compute-bound", image_size=32, channels=32, blocks=2, batch_per_replica=16)
# Graph construction, not arithmetic, dominates on a small CPU host: a synchronised
# ResNet-50 at 8 replicas takes minutes to trace and optimise. Hence tiny images (the
# smallest each backbone accepts with its usual stem) and 2 images per replica.
RESNET18 = ResNetSetting(
    "ResNet-18", image_size=16, batch_per_replica=2, replica_counts=(1, 2, 4, 8)
)
RESNET50 = ResNetSetting(
    "ResNet-50", image_size=32, batch_per_replica=2, replica_counts=(1, 2, 4, 8)
)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What one invocation measures, derived from the command line."""

    device: str
    replica_counts: tuple[int, ...]
    reps: int
    steps_per_rep: int
    warmup_steps: int
    # Replicas of the collective count and of the robustness check: both are
    # per-replica properties, and tracing 8 replicas costs more than it tells.
    probe_replicas: int
    quick: bool
    settings: tuple[Setting, ...] = (LATENCY_BOUND, COMPUTE_BOUND)
    sections: tuple[str, ...] = SECTIONS
    resnets: tuple[ResNetSetting, ...] = ()
    resnet_reps: int = 3
    multiworker: ResNetSetting | None = None
    multiworker_reps: int = 3
    multiworker_variants: tuple[str, ...] = VARIANTS
    floor_replicas: tuple[int, ...] = (2, 4, 8)
    # Replica counts of the analytic scaling model (bytes only, nothing is run).
    model_replicas: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 128, 256)

    @property
    def collective_replicas(self) -> tuple[int, ...]:
        """Replica counts of the collectives section: the floor's and the probe's."""
        return tuple(sorted({*self.floor_replicas, self.probe_replicas}))


# --------------------------------------------------------------------------------------
# Devices and layers.
# --------------------------------------------------------------------------------------


def configure_devices(device: str, gpu_memory_mb: int) -> tuple[list[str], str]:
    """Splits one physical device into logical ones; must run before TF initialises.

    Args:
        device: `"cpu"` or `"gpu"`.
        gpu_memory_mb: Memory limit of each logical GPU.

    Returns:
        The logical device names and a description of the hardware.

    Raises:
        SystemExit: With `device="gpu"` on a machine without a visible GPU.
    """
    if device == "cpu":
        cpus = tf.config.list_physical_devices("CPU")
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_DEVICES
        )
        names = [d.name for d in tf.config.list_logical_devices("CPU")]
        description = (
            f"{NUM_LOGICAL_DEVICES} logical CPU devices on {os.cpu_count()} CPU cores "
            f"({platform.processor() or platform.machine()})"
        )
        return names, description

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise SystemExit(
            "--device gpu: TensorFlow sees no GPU on this machine "
            "(tf.config.list_physical_devices('GPU') is empty). Run with --device cpu "
            "(the default), or install a CUDA-enabled TensorFlow on a machine with a GPU."
        )
    tf.config.set_visible_devices(gpus[0], "GPU")
    tf.config.set_logical_device_configuration(
        gpus[0],
        [tf.config.LogicalDeviceConfiguration(memory_limit=gpu_memory_mb)] * NUM_LOGICAL_DEVICES,
    )
    names = [d.name for d in tf.config.list_logical_devices("GPU")]
    details = tf.config.experimental.get_device_details(gpus[0])
    description = (
        f"{NUM_LOGICAL_DEVICES} logical GPUs ({gpu_memory_mb} MB each) on one "
        f"{details.get('device_name', 'GPU')}; host has {os.cpu_count()} CPU cores"
    )
    return names, description


def make_strategies(
    devices: Sequence[str], counts: Sequence[int]
) -> dict[int, tf.distribute.MirroredStrategy]:
    """One MirroredStrategy per replica count, each with its own collective key range.

    Two MirroredStrategy objects of different sizes in one process would reuse
    the same collective group keys, so every size is its own subclass with a
    distinct `_collective_key_base`.
    """
    strategies = {}
    for count in sorted(set(counts)):
        cls = type(
            f"BenchmarkMirroredStrategy{count}",
            (tf.distribute.MirroredStrategy,),
            {"_collective_key_base": 10_000 * count},
        )
        strategies[count] = cls(list(devices[:count]))
    return strategies


def make_batch_norm(variant: str, **kwargs: Any) -> keras.layers.Layer:
    if variant == "plain":
        return keras.layers.BatchNormalization(**kwargs)
    if variant == "keras":
        return keras.layers.BatchNormalization(synchronized=True, **kwargs)
    if variant == "ours":
        return SyncBatchNormalization(**kwargs)
    if variant == "ours_gather":
        return SyncBatchNormalization(exchange="gather", **kwargs)
    if variant == "ours_g2":
        return SyncBatchNormalization(group_size=2, **kwargs)
    raise ValueError(f"Unknown variant {variant!r}; expected one of {RESNET_VARIANTS}.")


_START = time.perf_counter()


def log(message: str) -> None:
    print(f"[{time.perf_counter() - _START:6.1f} s] {message}", flush=True)


def per_replica_constant(
    strategy: tf.distribute.Strategy, shards: Sequence[np.ndarray]
) -> tf.distribute.DistributedValues:
    """Places `shards[i]` on replica `i`."""
    return strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(shards[ctx.replica_id_in_sync_group])
    )


# --------------------------------------------------------------------------------------
# Counting all-reduces while tracing, and timing.
# --------------------------------------------------------------------------------------


class AllReduceCounter:
    """Counts tensors passed to `ReplicaContext.all_reduce` while tracing (benchmark only).

    `ReplicaContext.all_reduce` issues one collective per flattened tensor (no
    packing by default), and its gradient calls `all_reduce` again, so this
    trace-time count must equal the number of collective ops in the graph.
    """

    def __init__(self) -> None:
        self.tensors = 0
        # Bytes of each tensor passed, `None` where its shape is not static.
        self.tensor_bytes: list[int | None] = []
        self._lock = threading.Lock()
        self._original = None

    @property
    def total_bytes(self) -> int | None:
        if any(size is None for size in self.tensor_bytes):
            return None
        return sum(self.tensor_bytes)

    def __enter__(self) -> AllReduceCounter:
        original = tf.distribute.ReplicaContext.all_reduce
        counter = self

        def counting_all_reduce(ctx, reduce_op, value, options=None):
            tensors = tf.nest.flatten(value)
            with counter._lock:
                counter.tensors += len(tensors)
                counter.tensor_bytes.extend(static_bytes(t) for t in tensors)
            return original(ctx, reduce_op, value, options)

        self._original = original
        tf.distribute.ReplicaContext.all_reduce = counting_all_reduce
        return self

    def __exit__(self, *exc_info: object) -> None:
        tf.distribute.ReplicaContext.all_reduce = self._original


def static_bytes(tensor: tf.Tensor) -> int | None:
    """Bytes of a tensor of static shape, else `None`."""
    if not tensor.shape.is_fully_defined():
        return None
    return tensor.shape.num_elements() * tensor.dtype.size


def time_interleaved(
    steps: dict[str, Callable[[], tf.Tensor]], reps: int, steps_per_rep: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Milliseconds per step of each variant, variants interleaved within a repetition.

    The order of the variants rotates between repetitions so that none is
    systematically measured first (right after another variant warmed caches).

    Returns:
        The per-repetition step times, and the seconds each variant's first
        step took (tracing and graph optimisation included).
    """
    first_step_s = {}
    for name, step in steps.items():
        start = time.perf_counter()
        step().numpy()
        first_step_s[name] = time.perf_counter() - start
        for _ in range(warmup - 1):
            step().numpy()
    order = list(steps)
    times: dict[str, list[float]] = {name: [] for name in order}
    for rep in range(reps):
        shift = rep % len(order)
        for name in order[shift:] + order[:shift]:
            start = time.perf_counter()
            for _ in range(steps_per_rep):
                loss = steps[name]()
            loss.numpy()
            times[name].append((time.perf_counter() - start) * 1e3 / steps_per_rep)
    return times, first_step_s


def paired_ratio(times: Sequence[float], plain_times: Sequence[float]) -> float:
    """Median over repetitions of the time ratio within each repetition.

    The variants of one repetition run back to back, so they see the same load
    on a shared machine; their ratio is steadier than a ratio of medians.
    """
    return statistics.median(t / p for t, p in zip(times, plain_times, strict=True))


def ratios_to_plain(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: paired_ratio(t, times["plain"]) for name, t in times.items()}


# --------------------------------------------------------------------------------------
# Rendering.
# --------------------------------------------------------------------------------------


def fmt(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def markdown_section(title: str, *blocks: str) -> str:
    """`## title`, then each block (a paragraph or a table), separated by blank lines."""
    return "\n".join(f"{block.rstrip()}\n" for block in (f"## {title}", *blocks))


def grouped_tables(
    rows: Sequence[dict[str, Any]],
    key: str,
    heading: Callable[[dict[str, Any]], str],
    header: Sequence[str],
    cells: Callable[[dict[str, Any]], Sequence[Any]],
) -> list[str]:
    """A `### heading` and a table for each value of `row[key]`, in order of first appearance.

    Args:
        rows: The section's rows.
        key: The row field that groups them (a model or a setting name).
        heading: The heading text, from the first row of a group.
        header: The table's column names.
        cells: One table row's cells, from one row.

    Returns:
        Blocks for `markdown_section`: heading, table, heading, table, ...
    """
    blocks = []
    for value in dict.fromkeys(row[key] for row in rows):
        group = [row for row in rows if row[key] == value]
        blocks.append(f"### {heading(group[0])}")
        blocks.append(markdown_table(header, [cells(row) for row in group]))
    return blocks
