"""Benchmark of cross-replica batch normalisation: collectives, step time, robustness.

Compares, side by side in one run, three batch-norm layers under
`tf.distribute.MirroredStrategy`:

* `plain`: `keras.layers.BatchNormalization()` (per-replica statistics),
* `keras`: `keras.layers.BatchNormalization(synchronized=True)`,
* `ours`: `tensorflow_similarity.layers.SyncBatchNormalization()`.

It prints three markdown tables and writes them, with the machine they were
measured on, to `<out>/sync_bn.md` and `<out>/sync_bn.json`
(`sync_bn_gpu.*` with `--device gpu`):

1. Collectives issued per batch-norm layer per training step, counted from the
   traced graph of a forward + `tape.gradient` step (nested function graphs
   included), cross-checked with a trace-time counter around
   `tf.distribute.ReplicaContext.all_reduce`. Target: ours <= 2.
2. Training step time (forward, backward, SGD update) of a small ResNet-style
   model with 1, 2, 4, 8 replicas, as ratios to plain batch norm, in a
   latency-bound setting (8x8 images, many thin batch-norm layers) and a
   compute-bound one (32x32 images, wider convolutions, larger batch).
   Target: our overhead (ratio - 1) at most half of Keras'.
3. Relative error of the batch variance against float64 NumPy when
   |mean| / std is 0, 1e2, 1e3, 1e4, data split over 4 replicas.
4. Step time and images/second of `ResNet18Sim` (16x16 images, CIFAR stem) and
   `ResNet50Sim` (32x32) at 1, 2, 4, 8 replicas, 2 images per replica: plain,
   Keras-synchronised, ours, and ours with `group_size=2`, with ratios to plain.
5. The same ResNet-18 step in two `MultiWorkerMirroredStrategy` processes on
   127.0.0.1 (`benchmark/sync_bn_worker.py`, one CPU replica each).
6. The analytic floor: all-reduces and bytes per replica per step of each
   synchronised batch norm (traced from the layers, not hard-coded) against the
   optimizer's gradient all-reduce of the same model, the time they take at the
   measured all-reduce latency and bandwidth of this host, and the overhead
   measured in table 4.

The replicas are logical devices carved out of one physical device (8 logical
CPUs by default; `--device gpu` splits the first GPU into 8 logical GPUs), so
step times measure the synchronisation cost, not a speed-up. On a CPU host the
replicas share the cores: timings are noisy, which is why the three variants
are interleaved within every repetition and medians are reported.

Graph construction dominates the cost of the ResNet tables on a small host: on
2 cores a synchronised ResNet-50 step at 8 replicas takes minutes to trace and
optimise (its graph has several times plain batch norm's ops). A full run is
therefore long (tables 1-3 take ~7 minutes on 2 cores, the ResNet table at
1, 2, 4, 8 replicas far longer); `--sections` and `--replicas` measure a part,
and the tables not measured are kept from the existing report in `--out`.

Usage:

    python benchmark/sync_bn.py                           # everything
    python benchmark/sync_bn.py --quick                   # smoke run, a few minutes
    python benchmark/sync_bn.py --sections resnet,floor --replicas 1,2,4
    python benchmark/sync_bn.py --device gpu              # logical GPUs on one GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# Importing these creates no TensorFlow context, so the logical devices can
# still be configured in main().
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from benchmark_common import markdown_table  # noqa: E402

from tensorflow_similarity.distribute.rebuild import all_layers  # noqa: E402
from tensorflow_similarity.layers import SyncBatchNormalization  # noqa: E402
from tensorflow_similarity.testing.local_cluster import run_local_workers  # noqa: E402

NUM_LOGICAL_DEVICES = 8
SECTIONS = ("collectives", "step_time", "robustness", "resnet", "multiworker", "floor")
VARIANTS = ("plain", "keras", "ours")
VARIANT_LABELS = {
    "plain": "plain `BatchNormalization`",
    "keras": "Keras `BatchNormalization(synchronized=True)`",
    "ours": "ours `SyncBatchNormalization`",
}
# The ResNet table adds ours with sync groups of two replicas.
RESNET_VARIANTS = (*VARIANTS, "ours_g2")
RESNET_VARIANT_LABELS = {**VARIANT_LABELS, "ours_g2": "ours, `group_size=2`"}
MEAN_TO_STD_RATIOS = (0.0, 1e2, 1e3, 1e4)
# Relative step-time noise on a shared 2-core host: with one replica, plain and
# ours run the same code, yet their times differ by up to ~5 %.
NOISE = 0.05
# Ops that move data between replicas. Group assignment and communicator setup
# ops also start with "Collective" but carry no tensor data.
COLLECTIVE_PREFIXES = ("Collective", "Nccl")
COLLECTIVE_SETUP_OPS = frozenset({"CollectiveAssignGroupV2", "CollectiveInitializeCommunicator"})
FREE_OPS = frozenset({"Const", "Identity", "IdentityN", "NoOp", "Placeholder"})


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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(
            "Compare plain, Keras-synchronised and tensorflow-similarity batch norm under "
            "MirroredStrategy: collectives per layer, step time, variance robustness."
        )
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Smoke run (1 and 2 replicas, smaller models, few steps); under a minute.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results",
        help="Folder for sync_bn.md and sync_bn.json (default: benchmark/results).",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "gpu"),
        default="cpu",
        help="cpu: 8 logical CPUs (default). gpu: 8 logical GPUs on the first physical GPU.",
    )
    parser.add_argument(
        "--gpu-memory-mb",
        type=int,
        default=4096,
        help="Memory limit of each logical GPU with --device gpu (default: 4096).",
    )
    parser.add_argument(
        "--sections",
        type=parse_sections,
        default=SECTIONS,
        help=(
            f"Comma-separated tables to measure, among {','.join(SECTIONS)} (default: all). "
            "`step_time` is the small-model table, `resnet` the ResNet-18/50 one. Tables not "
            "measured are kept from an existing report in --out for the same --device."
        ),
    )
    parser.add_argument(
        "--replicas",
        type=parse_replicas,
        default=None,
        help=(
            "Comma-separated replica counts of the step-time tables, e.g. 1,2,4 "
            "(default: 1,2,4,8; with --quick, the quick counts)."
        ),
    )
    return parser.parse_args(argv)


def parse_sections(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown section(s) {unknown or text!r}; choose a comma-separated subset of "
            f"{','.join(SECTIONS)}, e.g. --sections resnet,multiworker,floor"
        )
    return tuple(name for name in SECTIONS if name in names)


def parse_replicas(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        counts = ()
    if not counts or not all(1 <= k <= NUM_LOGICAL_DEVICES for k in counts):
        raise argparse.ArgumentTypeError(
            f"--replicas {text!r}: expected comma-separated integers from 1 to "
            f"{NUM_LOGICAL_DEVICES} (the logical devices), e.g. --replicas 1,2,4"
        )
    return counts


def run_config(args: argparse.Namespace) -> RunConfig:
    config = _base_run_config(args)
    if args.replicas is None:
        return config
    return dataclasses.replace(
        config,
        replica_counts=args.replicas,
        resnets=tuple(dataclasses.replace(r, replica_counts=args.replicas) for r in config.resnets),
    )


def _base_run_config(args: argparse.Namespace) -> RunConfig:
    if args.quick:
        return RunConfig(
            device=args.device,
            replica_counts=(1, 2),
            reps=3,
            steps_per_rep=1,
            warmup_steps=1,
            probe_replicas=2,
            quick=True,
            # Tracing dominates a smoke run, and its cost grows with the layer count.
            settings=(
                dataclasses.replace(LATENCY_BOUND, blocks=1),
                dataclasses.replace(COMPUTE_BOUND, image_size=16, blocks=1),
            ),
            sections=args.sections,
            # Synchronised ResNets take minutes to trace; a smoke run covers the code
            # path with ResNet-18 on 8x8 images, on one replica here, two processes below.
            resnets=(dataclasses.replace(RESNET18, image_size=8, replica_counts=(1,)),),
            resnet_reps=2,
            multiworker=dataclasses.replace(RESNET18, image_size=8, replica_counts=(2,)),
            multiworker_reps=2,
            multiworker_variants=("plain", "ours"),
            floor_replicas=(2,),
        )
    return RunConfig(
        device=args.device,
        replica_counts=(1, 2, 4, 8),
        reps=15,
        steps_per_rep=2,
        warmup_steps=2,
        probe_replicas=4,
        quick=False,
        sections=args.sections,
        resnets=(RESNET18, RESNET50),
        resnet_reps=3,
        multiworker=dataclasses.replace(RESNET18, replica_counts=(2,)),
        multiworker_reps=5,
        floor_replicas=(2, 4, 8),
    )


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
    raise ValueError(f"Unknown variant {variant!r}; expected one of {VARIANTS}.")


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
# 1. Collectives per batch-norm layer.
# --------------------------------------------------------------------------------------


def count_graph_ops(graph: tf.Graph) -> tuple[int, int]:
    """Counts ops in `graph` and its nested function graphs.

    Returns:
        `(collectives, compute)`: data-moving collective ops, and every other op
        that does work at run time (constants, placeholders, identities and
        no-ops excluded).
    """
    op_types = [op.type for op in graph.get_operations()]
    for function in graph.as_graph_def().library.function:
        op_types.extend(node.op for node in function.node_def)
    collectives = sum(
        1
        for op_type in op_types
        if op_type.startswith(COLLECTIVE_PREFIXES) and op_type not in COLLECTIVE_SETUP_OPS
    )
    compute = sum(1 for op_type in op_types if op_type not in FREE_OPS) - collectives
    return collectives, compute


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


def measure_collectives(
    strategy: tf.distribute.MirroredStrategy, num_batch_norm: int = 3, width: int = 4
) -> list[dict[str, Any]]:
    """Collectives per batch-norm layer per replica, forward and forward + backward.

    The model is `num_batch_norm` times Dense -> batch norm; the step is a bare
    `tape.gradient` (no optimizer), because gradient all-reduce of trainable
    variables belongs to the optimizer, not to the batch-norm layer. Plain batch
    norm's count (the model's collectives without any synchronised layer) is
    subtracted before dividing by the number of layers.
    """
    replicas = strategy.num_replicas_in_sync
    x = tf.ones((2 * width, width))
    raw = {}
    for variant in VARIANTS:
        with strategy.scope():
            layers = [keras.Input((width,))]
            for _ in range(num_batch_norm):
                layers += [keras.layers.Dense(width), make_batch_norm(variant)]
            model = keras.Sequential(layers)

        @tf.function
        def forward(x, model=model):
            return strategy.run(lambda x: model(x, training=True), args=(x,))

        @tf.function
        def forward_backward(x, model=model):
            def replica_fn(x):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(tf.square(model(x, training=True)))
                return tape.gradient(loss, model.trainable_variables)

            return strategy.run(replica_fn, args=(x,))

        with AllReduceCounter() as forward_counter:
            forward_graph = forward.get_concrete_function(x).graph
        with AllReduceCounter() as step_counter:
            step_graph = forward_backward.get_concrete_function(x).graph
        forward_collectives, _ = count_graph_ops(forward_graph)
        step_collectives, step_compute = count_graph_ops(step_graph)
        raw[variant] = {
            "forward_graph": forward_collectives,
            "step_graph": step_collectives,
            "step_compute": step_compute,
            "forward_trace": forward_counter.tensors,
            "step_trace": step_counter.tensors,
        }

    def per_layer(variant: str, key: str) -> float:
        return (raw[variant][key] - raw["plain"][key]) / (replicas * num_batch_norm)

    rows = []
    for variant in VARIANTS:
        forward = per_layer(variant, "forward_graph")
        total = per_layer(variant, "step_graph")
        rows.append(
            {
                "variant": variant,
                "replicas": replicas,
                "batch_norm_layers": num_batch_norm,
                "graph_ops_forward": raw[variant]["forward_graph"],
                "graph_ops_step": raw[variant]["step_graph"],
                "forward_per_layer": forward,
                "backward_per_layer": total - forward,
                "total_per_layer": total,
                "trace_counter_per_layer": per_layer(variant, "step_trace"),
                "extra_compute_ops_per_layer": per_layer(variant, "step_compute"),
                "counts_agree": (
                    raw[variant]["step_graph"] == raw[variant]["step_trace"]
                    and raw[variant]["forward_graph"] == raw[variant]["forward_trace"]
                ),
            }
        )
    return rows


# --------------------------------------------------------------------------------------
# 2. Training step time.
# --------------------------------------------------------------------------------------


def build_resnet(setting: Setting, variant: str, num_classes: int = 10) -> keras.Model:
    """A small ResNet: conv-BN-ReLU stem, `blocks` residual blocks, pooling, dense."""

    def conv():
        return keras.layers.Conv2D(setting.channels, 3, padding="same", use_bias=False)

    inputs = keras.Input((setting.image_size, setting.image_size, 3))
    x = keras.layers.ReLU()(make_batch_norm(variant)(conv()(inputs)))
    for _ in range(setting.blocks):
        y = keras.layers.ReLU()(make_batch_norm(variant)(conv()(x)))
        y = make_batch_norm(variant)(conv()(y))
        x = keras.layers.ReLU()(keras.layers.Add()([x, y]))
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes)(x)
    return keras.Model(inputs, outputs, name=f"resnet_{variant}")


def make_train_step(
    strategy: tf.distribute.MirroredStrategy, setting: Setting, variant: str, weights: list
) -> Callable[[], tf.Tensor]:
    """A `tf.function` step (forward, backward, SGD) over per-replica constant data."""
    replicas = strategy.num_replicas_in_sync
    global_batch = setting.batch_per_replica * replicas
    with strategy.scope():
        model = build_resnet(setting, variant)
        model.set_weights(weights)
        optimizer = keras.optimizers.SGD(learning_rate=1e-3)
        optimizer.build(model.trainable_variables)

    rng = np.random.default_rng(0)
    shape = (replicas, setting.batch_per_replica, setting.image_size, setting.image_size, 3)
    images = per_replica_constant(strategy, rng.standard_normal(shape).astype(np.float32))
    labels = per_replica_constant(
        strategy, rng.integers(0, 10, (replicas, setting.batch_per_replica)).astype(np.int32)
    )

    @tf.function
    def train_step(images, labels):
        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                logits = model(images, training=True)
                per_example = keras.losses.sparse_categorical_crossentropy(
                    labels, logits, from_logits=True
                )
                # Each replica's share of the global-batch mean; the optimizer
                # sums gradients over replicas.
                loss = tf.reduce_sum(per_example) / global_batch
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        losses = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return lambda: train_step(images, labels)


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


def measure_step_times(
    strategies: dict[int, tf.distribute.MirroredStrategy], config: RunConfig
) -> list[dict[str, Any]]:
    rows = []
    for setting in config.settings:
        keras.utils.set_random_seed(0)
        weights = build_resnet(setting, "plain").get_weights()
        for replicas in config.replica_counts:
            strategy = strategies[replicas]
            steps = {
                variant: make_train_step(strategy, setting, variant, weights)
                for variant in VARIANTS
            }
            times, first_step_s = time_interleaved(
                steps, config.reps, config.steps_per_rep, config.warmup_steps
            )
            median = {variant: statistics.median(times[variant]) for variant in VARIANTS}
            ours_ratio = paired_ratio(times["ours"], times["plain"])
            keras_ratio = paired_ratio(times["keras"], times["plain"])
            rows.append(
                {
                    "setting": setting.name,
                    **dataclasses.asdict(setting),
                    "batch_norm_layers": setting.num_batch_norm,
                    "replicas": replicas,
                    "median_ms": median,
                    "ours_over_plain": ours_ratio,
                    "keras_over_plain": keras_ratio,
                    "ours_overhead": ours_ratio - 1.0,
                    "keras_overhead": keras_ratio - 1.0,
                    "overhead_ratio": overhead_ratio(ours_ratio - 1.0, keras_ratio - 1.0),
                    "times_ms": times,
                    "first_step_s": first_step_s,
                }
            )
            log(
                f"  {setting.name}, {replicas} replica(s): "
                + ", ".join(f"{v} {median[v]:.1f} ms" for v in VARIANTS)
            )
            del steps
            keras.backend.clear_session()
    return rows


def paired_ratio(times: Sequence[float], plain_times: Sequence[float]) -> float:
    """Median over repetitions of the time ratio within each repetition.

    The variants of one repetition run back to back, so they see the same load
    on a shared machine; their ratio is steadier than a ratio of medians.
    """
    return statistics.median(t / p for t, p in zip(times, plain_times, strict=True))


def overhead_ratio(ours_overhead: float, keras_overhead: float) -> float | None:
    """Ours' overhead over Keras'; `None` where Keras' overhead is within timing noise."""
    if keras_overhead <= NOISE:
        return None
    return ours_overhead / keras_overhead


# --------------------------------------------------------------------------------------
# 3. Robustness of the variance.
# --------------------------------------------------------------------------------------


def measure_variance_errors(
    strategy: tf.distribute.MirroredStrategy,
    ratios: Sequence[float] = MEAN_TO_STD_RATIOS,
    channels: int = 8,
    batch_per_replica: int = 64,
) -> list[dict[str, Any]]:
    """Relative error of the batch variance against float64, worst channel.

    Channel `c` has standard deviation `std_c` spread over four decades
    (1e-2 ... 1e2) and mean `ratio * std_c`; the float32 data is split over the
    replicas. With `momentum=0` the moving variance after one training call is
    the batch variance, read back from every replica (they must agree). The
    float64 reference is the population variance of the same float32 values.
    `single device` is plain batch norm on the whole batch, on one device.
    """
    replicas = strategy.num_replicas_in_sync
    stds = np.logspace(-2, 2, channels)
    rng = np.random.default_rng(1)
    rows = []
    for ratio in ratios:
        data = (rng.standard_normal((replicas * batch_per_replica, channels)) * stds) + ratio * stds
        data = data.astype(np.float32)
        reference = data.astype(np.float64).var(axis=0)

        errors = {}
        single = keras.layers.BatchNormalization(momentum=0.0)
        single(data, training=True)
        errors["single_device"] = relative_error(single.moving_variance.numpy(), reference)

        shards = data.reshape(replicas, batch_per_replica, channels)
        inputs = per_replica_constant(strategy, shards)
        for variant in ("keras", "ours"):
            with strategy.scope():
                layer = make_batch_norm(variant, momentum=0.0)
                layer.build((None, channels))

            @tf.function
            def update(inputs, layer=layer):
                def replica_fn(x):
                    layer(x, training=True)
                    return tf.identity(layer.moving_variance)

                return strategy.run(replica_fn, args=(inputs,))

            per_replica = strategy.experimental_local_results(update(inputs))
            errors[variant] = max(relative_error(v.numpy(), reference) for v in per_replica)
        rows.append({"mean_over_std": ratio, "replicas": replicas, "relative_error": errors})
    return rows


def relative_error(value: np.ndarray, reference: np.ndarray) -> float:
    return float(np.max(np.abs(value.astype(np.float64) - reference) / reference))


# --------------------------------------------------------------------------------------
# 4. ResNet-18 / ResNet-50 step time and throughput.
# --------------------------------------------------------------------------------------


def resnet_variants(replicas: int) -> tuple[str, ...]:
    """The variants worth timing: groups of two differ from ours only above 2 replicas."""
    if replicas > 2 and replicas % 2 == 0:
        return RESNET_VARIANTS
    return VARIANTS


def keras_synchronized(model: keras.Model) -> keras.Model:
    """A copy of `model` whose batch norm is `BatchNormalization(synchronized=True)`."""

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        config = layer.get_config()
        if type(layer) is keras.layers.BatchNormalization:
            return keras.layers.BatchNormalization(**{**config, "synchronized": True})
        return type(layer).from_config(config)

    copy = keras.models.clone_model(model, clone_function=clone, recursive=True)
    copy.set_weights(model.get_weights())
    return copy


def build_resnet_variant(setting: ResNetSetting, variant: str) -> keras.Model:
    """The setting's backbone with the similarity head and the variant's batch norm."""
    from tensorflow_similarity.architectures import ResNet18Sim, ResNet50Sim
    from tensorflow_similarity.distribute import GroupSyncBatchNorm

    builder = {"ResNet-18": ResNet18Sim, "ResNet-50": ResNet50Sim}[setting.name]
    sync_bn = {"plain": False, "keras": False, "ours": True, "ours_g2": GroupSyncBatchNorm(2)}
    model = builder((setting.image_size, setting.image_size, 3), sync_bn=sync_bn[variant])
    return keras_synchronized(model) if variant == "keras" else model


def model_structure(model: keras.Model) -> dict[str, Any]:
    """What the analytic floor needs: batch-norm widths and the trainable parameters."""
    channels = [
        int(layer.gamma.shape[0])
        for layer in all_layers(model)
        if isinstance(layer, keras.layers.BatchNormalization)
    ]
    return {
        "batch_norm_layers": len(channels),
        "batch_norm_channels": sum(channels),
        "channels_per_layer": channels,
        "trainable_variables": len(model.trainable_variables),
        "trainable_parameters": int(sum(np.prod(v.shape) for v in model.trainable_variables)),
    }


@dataclasses.dataclass
class TrainStep:
    """A compiled-on-first-call training step and what tracing it recorded."""

    run: Callable[[], tf.Tensor]
    trace: Callable[[], Any]


def make_embedding_train_step(
    strategy: tf.distribute.Strategy, setting: ResNetSetting, variant: str, weights: list
) -> TrainStep:
    """Forward, backward and SGD update of a ResNet embedding model on constant data.

    The loss is the global-batch mean squared distance of the embeddings to
    fixed random targets: any loss serves, the step's cost is the backbone's.
    """
    replicas = strategy.num_replicas_in_sync
    global_batch = setting.batch_per_replica * replicas
    with strategy.scope():
        model = build_resnet_variant(setting, variant)
        model.set_weights(weights)
        optimizer = keras.optimizers.SGD(learning_rate=1e-3)
        optimizer.build(model.trainable_variables)

    rng = np.random.default_rng(0)
    size = setting.image_size
    images = per_replica_constant(
        strategy,
        rng.standard_normal((replicas, setting.batch_per_replica, size, size, 3)).astype(
            np.float32
        ),
    )
    targets = per_replica_constant(
        strategy,
        rng.standard_normal((replicas, setting.batch_per_replica, model.output_shape[-1])).astype(
            np.float32
        ),
    )

    @tf.function
    def train_step(images, targets):
        def replica_step(images, targets):
            with tf.GradientTape() as tape:
                embeddings = model(images, training=True)
                loss = tf.reduce_sum(tf.square(embeddings - targets)) / global_batch
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        losses = strategy.run(replica_step, args=(images, targets))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return TrainStep(
        run=lambda: train_step(images, targets),
        trace=lambda: train_step.get_concrete_function(images, targets),
    )


def time_train_steps(steps: dict[str, TrainStep], reps: int, warmup: int) -> dict[str, Any]:
    """Traces each step (counting its all-reduces), then times them interleaved."""
    trace_s, collectives, payload = {}, {}, {}
    for name, step in steps.items():
        start = time.perf_counter()
        with AllReduceCounter() as counter:
            step.trace()
        trace_s[name] = time.perf_counter() - start
        collectives[name] = counter.tensors
        payload[name] = counter.total_bytes
    times, first_step_s = time_interleaved(
        {name: step.run for name, step in steps.items()}, reps, 1, warmup
    )
    return {
        "times_ms": times,
        "median_ms": {name: statistics.median(t) for name, t in times.items()},
        "trace_s": trace_s,
        "first_step_s": first_step_s,
        "traced_all_reduces": collectives,
        "traced_all_reduce_bytes": payload,
    }


def ratios_to_plain(times: dict[str, list[float]]) -> dict[str, float]:
    return {name: paired_ratio(t, times["plain"]) for name, t in times.items()}


def measure_resnets(
    strategies: dict[int, tf.distribute.MirroredStrategy], config: RunConfig
) -> list[dict[str, Any]]:
    rows = []
    for setting in config.resnets:
        keras.utils.set_random_seed(0)
        reference = build_resnet_variant(setting, "plain")
        weights = reference.get_weights()
        structure = model_structure(reference)
        del reference
        for replicas in setting.replica_counts:
            strategy = strategies[replicas]
            log(f"  {setting.name}, {replicas} replica(s): building and tracing...")
            steps = {
                variant: make_embedding_train_step(strategy, setting, variant, weights)
                for variant in resnet_variants(replicas)
            }
            measured = time_train_steps(steps, config.resnet_reps, warmup=1)
            global_batch = setting.batch_per_replica * replicas
            rows.append(
                {
                    "model": setting.name,
                    **dataclasses.asdict(setting),
                    "batch_norm_layers": structure["batch_norm_layers"],
                    "trainable_parameters": structure["trainable_parameters"],
                    "trainable_variables": structure["trainable_variables"],
                    "replicas": replicas,
                    "global_batch": global_batch,
                    **measured,
                    "images_per_s": {
                        name: global_batch / (ms / 1e3)
                        for name, ms in measured["median_ms"].items()
                    },
                    "over_plain": ratios_to_plain(measured["times_ms"]),
                }
            )
            log(
                f"  {setting.name}, {replicas} replica(s): "
                + ", ".join(f"{v} {ms:.0f} ms" for v, ms in measured["median_ms"].items())
            )
            del steps
            keras.backend.clear_session()
    return rows


# --------------------------------------------------------------------------------------
# 5. Two worker processes.
# --------------------------------------------------------------------------------------

WORKER_SCRIPT = Path(__file__).resolve().parent / "sync_bn_worker.py"


def run_worker_group(args: Sequence[str], num_workers: int, timeout: float) -> list[str]:
    """Runs `sync_bn_worker.py` in `num_workers` processes with a shared `TF_CONFIG`.

    Every worker is killed and reaped on return, whatever happened.

    Returns:
        Each worker's combined output, in task order.

    Raises:
        RuntimeError: If a worker fails or the group outlives `timeout` seconds.
    """
    return run_local_workers(WORKER_SCRIPT, num_workers, list(args), timeout=timeout)


def measure_multiworker(config: RunConfig, timeout: float) -> dict[str, Any]:
    """The ResNet step with one CPU replica in each of two processes on this host."""
    setting = config.multiworker
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        args = [
            "--model",
            setting.name,
            "--image-size",
            str(setting.image_size),
            "--batch-per-replica",
            str(setting.batch_per_replica),
            "--variants",
            ",".join(config.multiworker_variants),
            "--reps",
            str(config.multiworker_reps),
            "--out",
            str(result_path),
        ]
        start = time.perf_counter()
        run_worker_group(args, num_workers=2, timeout=timeout)
        measured = json.loads(result_path.read_text())
    global_batch = 2 * setting.batch_per_replica
    return {
        "model": setting.name,
        **dataclasses.asdict(setting),
        "workers": 2,
        "replicas": 2,
        "global_batch": global_batch,
        **measured,
        "images_per_s": {
            name: global_batch / (ms / 1e3) for name, ms in measured["median_ms"].items()
        },
        "over_plain": ratios_to_plain(measured["times_ms"]),
        "wall_s": time.perf_counter() - start,
    }


# --------------------------------------------------------------------------------------
# 6. Analytic floor: collectives and bytes per step.
# --------------------------------------------------------------------------------------


def batch_norm_payload(strategy: tf.distribute.MirroredStrategy, variant: str) -> dict[str, Any]:
    """All-reduces and bytes one batch-norm layer adds per replica per training step.

    Traced, not hard-coded: a Dense -> batch norm model is traced with 3 and
    with 5 channels (forward + `tape.gradient`), the all-reduced tensor sizes
    recorded, and the bytes fitted as `per_channel * C + fixed`.
    """
    counts, sizes = {}, {}
    for channels in (3, 5):
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((channels,)),
                    keras.layers.Dense(channels),
                    SyncBatchNormalization(group_size=2)
                    if variant == "ours_g2"
                    else make_batch_norm(variant),
                ]
            )

        @tf.function
        def step(x, model=model):
            def replica_fn(x):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(tf.square(model(x, training=True)))
                return tape.gradient(loss, model.trainable_variables)

            return strategy.run(replica_fn, args=(x,))

        with AllReduceCounter() as counter:
            step.get_concrete_function(tf.ones((4, channels)))
        replicas = strategy.num_replicas_in_sync
        counts[channels] = counter.tensors // replicas
        sizes[channels] = counter.total_bytes // replicas
    per_channel = (sizes[5] - sizes[3]) / 2
    return {
        "all_reduces": counts[3],
        "bytes_per_channel": per_channel,
        "fixed_bytes": sizes[3] - 3 * per_channel,
        "counts_agree": counts[3] == counts[5],
    }


def gradient_payload_rule(strategy: tf.distribute.MirroredStrategy) -> dict[str, Any]:
    """How the Keras optimizer all-reduces gradients, from a traced `apply_gradients` step.

    Keras passes the whole gradient list to one `ReplicaContext.all_reduce`,
    which the strategy packs: the graph holds fewer collectives than tensors.
    """
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2, use_bias=False)]
        )
        optimizer = keras.optimizers.SGD(learning_rate=1e-3)
        optimizer.build(model.trainable_variables)

    @tf.function
    def step(x):
        def replica_fn(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

        strategy.run(replica_fn, args=(x,))

    with AllReduceCounter() as counter:
        graph = step.get_concrete_function(tf.ones((4, 3))).graph
    replicas = strategy.num_replicas_in_sync
    parameters = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    graph_collectives, _ = count_graph_ops(graph)
    return {
        "tensors_per_variable": counter.tensors / replicas / len(model.trainable_variables),
        "bytes_per_parameter": counter.total_bytes / replicas / parameters,
        "collectives_per_step": graph_collectives / replicas,
    }


def measure_collective_cost(
    strategy: tf.distribute.MirroredStrategy, chain: int = 16, large_floats: int = 1 << 20
) -> dict[str, float]:
    """Latency of one small all-reduce and time per byte of a large one, per replica.

    Each replica runs a chain of dependent all-reduces, so the calls cannot
    overlap, as the batch-norm layers of a network cannot.
    """

    def make_chain(size: int, length: int) -> Callable[[], tf.Tensor]:
        replicas = strategy.num_replicas_in_sync
        values = per_replica_constant(strategy, np.ones((replicas, size), np.float32))

        @tf.function
        def run(values):
            def replica_fn(x):
                ctx = tf.distribute.get_replica_context()
                for _ in range(length):
                    x = ctx.all_reduce(tf.distribute.ReduceOp.SUM, x) / replicas
                return x[0]

            out = strategy.run(replica_fn, args=(values,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, out, axis=None)

        return lambda: run(values)

    def seconds_per_call(fn: Callable[[], tf.Tensor], length: int, reps: int = 7) -> float:
        fn().numpy()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn().numpy()
            times.append(time.perf_counter() - start)
        return statistics.median(times) / length

    small_s = seconds_per_call(make_chain(1, chain), chain)
    large_length = 4
    large_s = seconds_per_call(make_chain(large_floats, large_length), large_length)
    large_bytes = 4 * large_floats
    return {
        "latency_us": small_s * 1e6,
        "bytes_per_s": large_bytes / max(large_s - small_s, 1e-9),
    }


def measure_floor(
    strategies: dict[int, tf.distribute.MirroredStrategy],
    config: RunConfig,
    resnet_rows: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """Collectives and bytes per step, sync batch norm vs gradient all-reduce, per model."""
    models = config.resnets
    structures = {}
    for setting in models:
        structures[setting.name] = model_structure(build_resnet_variant(setting, "plain"))
        keras.backend.clear_session()
    per_replica_count = []
    for replicas in config.floor_replicas:
        strategy = strategies[replicas]
        log(f"  floor, {replicas} replicas: per-layer payload and collective cost...")
        layer = {
            variant: batch_norm_payload(strategy, variant)
            for variant in resnet_variants(replicas)
            if variant != "plain"
        }
        per_replica_count.append(
            {
                "replicas": replicas,
                "per_layer": layer,
                "gradient_rule": gradient_payload_rule(strategy),
                "collective_cost": measure_collective_cost(strategy),
            }
        )
        keras.backend.clear_session()

    measured = {(r["model"], r["replicas"]): r for r in resnet_rows}
    rows = []
    for setting in models:
        structure = structures[setting.name]
        for probe in per_replica_count:
            replicas = probe["replicas"]
            cost = probe["collective_cost"]

            def floor_ms(all_reduces: float, payload: float, cost=cost) -> float:
                return (all_reduces * cost["latency_us"] * 1e-3) + payload / cost[
                    "bytes_per_s"
                ] * 1e3

            gradient = {
                "tensors": structure["trainable_variables"],
                "all_reduces": probe["gradient_rule"]["collectives_per_step"],
                "bytes": 4 * structure["trainable_parameters"],
            }
            gradient["floor_ms"] = floor_ms(gradient["all_reduces"], gradient["bytes"])
            resnet_row = measured.get((setting.name, replicas))
            variants = {}
            for variant, per_layer in probe["per_layer"].items():
                all_reduces = per_layer["all_reduces"] * structure["batch_norm_layers"]
                payload = (
                    per_layer["bytes_per_channel"] * structure["batch_norm_channels"]
                    + per_layer["fixed_bytes"] * structure["batch_norm_layers"]
                )
                entry = {
                    "all_reduces": all_reduces,
                    "bytes": payload,
                    "floor_ms": floor_ms(all_reduces, payload),
                    "measured_overhead_ms": None,
                    "traced_total_agrees": None,
                }
                if resnet_row is not None and variant in resnet_row["median_ms"]:
                    entry["measured_overhead_ms"] = (
                        resnet_row["median_ms"][variant] - resnet_row["median_ms"]["plain"]
                    )
                    traced = resnet_row["traced_all_reduces"][variant] / replicas
                    entry["traced_total_agrees"] = traced == all_reduces + gradient["tensors"]
                variants[variant] = entry
            rows.append(
                {
                    "model": setting.name,
                    "replicas": replicas,
                    "batch_norm_layers": structure["batch_norm_layers"],
                    "batch_norm_channels": structure["batch_norm_channels"],
                    "trainable_parameters": structure["trainable_parameters"],
                    "gradient": gradient,
                    "batch_norm": variants,
                    "plain_step_ms": None
                    if resnet_row is None
                    else resnet_row["median_ms"]["plain"],
                }
            )
    return {"probes": per_replica_count, "rows": rows}


# --------------------------------------------------------------------------------------
# Report.
# --------------------------------------------------------------------------------------


def metadata(config: RunConfig, description: str, argv: Sequence[str]) -> dict[str, Any]:
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["python", *argv]),
        "device": config.device,
        "hardware": description,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "quick": config.quick,
        "replica_counts": list(config.replica_counts),
        "reps": config.reps,
        "steps_per_rep": config.steps_per_rep,
        "settings": [dataclasses.asdict(s) for s in config.settings],
        "resnet_settings": [dataclasses.asdict(s) for s in config.resnets],
        "resnet_reps": config.resnet_reps,
        "multiworker_setting": (
            None if config.multiworker is None else dataclasses.asdict(config.multiworker)
        ),
        "floor_replicas": list(config.floor_replicas),
    }


def fmt(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def collectives_section(rows: list[dict[str, Any]]) -> str:
    ours = next(r for r in rows if r["variant"] == "ours")
    keras_row = next(r for r in rows if r["variant"] == "keras")
    table = markdown_table(
        [
            "layer",
            "forward / layer",
            "backward / layer",
            "total / layer",
            "trace counter / layer",
            "graph = counter",
            "other ops / layer",
        ],
        [
            [
                VARIANT_LABELS[r["variant"]],
                fmt(r["forward_per_layer"], 1),
                fmt(r["backward_per_layer"], 1),
                fmt(r["total_per_layer"], 1),
                fmt(r["trace_counter_per_layer"], 1),
                "yes" if r["counts_agree"] else "NO",
                fmt(r["extra_compute_ops_per_layer"], 1),
            ]
            for r in rows
        ],
    )
    met = "met" if ours["total_per_layer"] <= 2 else "NOT met"
    return (
        "## Collectives per batch-norm layer per training step\n\n"
        f"Counted from the traced graph of a forward + `tape.gradient` step ({ours['replicas']} "
        f"replicas, {ours['batch_norm_layers']} Dense + batch-norm layers, nested function "
        "graphs included), per replica, minus plain batch norm's count, per layer. Gradient "
        "all-reduce of trainable variables is the optimizer's and is not in this step. The "
        "trace counter counts tensors passed to `ReplicaContext.all_reduce` while tracing. "
        "Other ops: non-collective ops added over plain batch norm (constants and "
        "identities excluded), per replica and layer.\n\n"
        f"{table}\n\n"
        f"Target ours <= 2: **{met}** (ours {fmt(ours['total_per_layer'], 0)}, Keras "
        f"{fmt(keras_row['total_per_layer'], 0)}).\n"
    )


def step_time_section(rows: list[dict[str, Any]]) -> str:
    parts = ["## Training step time under MirroredStrategy\n"]
    parts.append(
        "Median ms per step (forward, backward, SGD update) of a ResNet-style model, the three "
        "variants with identical weights, interleaved within every repetition. Ratios to plain "
        "are medians of the per-repetition ratios; overhead = ratio - 1. Target: ours' "
        "overhead at most half of Keras' (overhead ratio <= 0.5); `n/a` where Keras' overhead "
        f"is under {NOISE:.0%} (timing noise). First step: tracing, graph optimisation and "
        "one step, in seconds.\n"
    )
    for setting_name in dict.fromkeys(r["setting"] for r in rows):
        setting_rows = [r for r in rows if r["setting"] == setting_name]
        first = setting_rows[0]
        parts.append(
            f"### {setting_name}: {first['image_size']}x{first['image_size']} images, "
            f"{first['channels']} channels, {first['batch_norm_layers']} batch-norm layers, "
            f"{first['batch_per_replica']} images per replica\n"
        )
        table_rows = []
        for r in setting_rows:
            ratio = r["overhead_ratio"]
            if ratio is None:
                verdict = "n/a"
            else:
                verdict = "yes" if ratio <= 0.5 else "no"
            table_rows.append(
                [
                    r["replicas"],
                    fmt(r["median_ms"]["plain"], 1),
                    fmt(r["median_ms"]["keras"], 1),
                    fmt(r["median_ms"]["ours"], 1),
                    fmt(r["keras_over_plain"], 3),
                    fmt(r["ours_over_plain"], 3),
                    "n/a" if ratio is None else fmt(ratio, 2),
                    verdict,
                    " / ".join(fmt(r["first_step_s"][v], 1) for v in VARIANTS),
                ]
            )
        parts.append(
            markdown_table(
                [
                    "replicas",
                    "plain ms",
                    "Keras-synced ms",
                    "ours ms",
                    "Keras / plain",
                    "ours / plain",
                    "ours overhead / Keras overhead",
                    "target met",
                    "first step s (plain / Keras / ours)",
                ],
                table_rows,
            )
            + "\n"
        )
    ratios = [r["overhead_ratio"] for r in rows if r["overhead_ratio"] is not None]
    met = sum(ratio <= 0.5 for ratio in ratios)
    parts.append(
        f"Target met in {met} of the {len(ratios)} rows where Keras' overhead is measurable.\n"
    )
    return "\n".join(parts)


def robustness_section(rows: list[dict[str, Any]]) -> str:
    table = markdown_table(
        ["abs(mean) / std", "Keras-synced", "ours", "single device, plain (float32)"],
        [
            [
                f"{r['mean_over_std']:g}",
                f"{r['relative_error']['keras']:.2e}",
                f"{r['relative_error']['ours']:.2e}",
                f"{r['relative_error']['single_device']:.2e}",
            ]
            for r in rows
        ],
    )
    return (
        "## Variance relative error against float64\n\n"
        f"Batch variance of float32 data split over {rows[0]['replicas']} replicas (8 channels, "
        "std from 1e-2 to 1e2, mean = ratio x std), read back as the moving variance with "
        "momentum 0; worst channel of `|var - var64| / var64`.\n\n"
        f"{table}\n"
    )


def resnet_section(rows: list[dict[str, Any]], device_label: str) -> str:
    parts = [f"## ResNet step time and throughput ({device_label})\n"]
    parts.append(
        "Median ms per training step (forward, backward, SGD update of every weight) and "
        "images per second of the similarity model (backbone, GeM pooling, 128-d embedding), "
        "all variants with identical weights, interleaved within every repetition. Tiny "
        "images and 2 images per replica: on a small host, graph construction, not arithmetic, "
        "limits what can be measured, and the step of a synchronised ResNet-50 at 8 replicas "
        "takes minutes to build. Ratios to plain are medians of per-repetition ratios. "
        "`group_size=2` is timed only with more than 2 replicas (with 2 it is ours). Build s: "
        "tracing + the first step (graph optimisation), per variant.\n"
    )
    for model in dict.fromkeys(r["model"] for r in rows):
        model_rows = [r for r in rows if r["model"] == model]
        first = model_rows[0]
        parts.append(
            f"### {model}: {first['image_size']}x{first['image_size']} images, "
            f"{first['batch_per_replica']} per replica, {first['batch_norm_layers']} batch-norm "
            f"layers, {first['trainable_parameters'] / 1e6:.1f} M trainable parameters, "
            f"{len(first['times_ms']['plain'])} timed steps per variant\n"
        )
        table_rows = []
        for r in model_rows:
            cells = [r["replicas"], r["global_batch"]]
            for variant in RESNET_VARIANTS:
                if variant in r["median_ms"]:
                    cells.append(
                        f"{r['median_ms'][variant]:.0f} ms, "
                        f"{r['images_per_s'][variant]:.1f} img/s"
                        + ("" if variant == "plain" else f", x{r['over_plain'][variant]:.2f}")
                    )
                else:
                    cells.append("n/a")
            cells.append(
                " / ".join(fmt(r["trace_s"][v] + r["first_step_s"][v], 0) for v in r["median_ms"])
            )
            table_rows.append(cells)
        parts.append(
            markdown_table(
                [
                    "replicas",
                    "global batch",
                    *(RESNET_VARIANT_LABELS[v] for v in RESNET_VARIANTS),
                    "build s (" + " / ".join(RESNET_VARIANTS) + ")",
                ],
                table_rows,
            )
            + "\n"
        )
    return "\n".join(parts)


def multiworker_section(row: dict[str, Any]) -> str:
    table = markdown_table(
        ["variant", "median ms", "images / s", "ratio to plain", "build s"],
        [
            [
                VARIANT_LABELS[v],
                fmt(row["median_ms"][v], 0),
                fmt(row["images_per_s"][v], 1),
                fmt(row["over_plain"][v], 3),
                fmt(row["trace_s"][v] + row["first_step_s"][v], 0),
            ]
            for v in row["median_ms"]
        ],
    )
    return (
        "## Two worker processes (MultiWorkerMirroredStrategy)\n\n"
        f"The {row['model']} step of the table above ({row['image_size']}x{row['image_size']} "
        f"images, {row['batch_per_replica']} per replica) in 2 processes on 127.0.0.1, one CPU "
        "replica each, collectives over gRPC; times from worker 0, "
        f"{len(row['times_ms']['plain'])} interleaved steps per variant.\n\n{table}\n"
    )


def floor_section(floor: dict[str, Any]) -> str:
    parts = ["## Analytic floor: all-reduces and bytes per training step\n"]
    probe_rows = []
    for probe in floor["probes"]:
        layer = probe["per_layer"]
        rule = probe["gradient_rule"]
        probe_rows.append(
            [
                probe["replicas"],
                *(
                    f"{layer[v]['all_reduces']}, {layer[v]['bytes_per_channel']:g} B x C"
                    + (f" + {layer[v]['fixed_bytes']:g} B" if layer[v]["fixed_bytes"] else "")
                    if v in layer
                    else "n/a"
                    for v in RESNET_VARIANTS[1:]
                ),
                f"{rule['collectives_per_step']:g} packed all-reduce(s), "
                f"{rule['bytes_per_parameter']:g} B / parameter",
                f"{probe['collective_cost']['latency_us']:.0f} us",
                f"{probe['collective_cost']['bytes_per_s'] / 1e9:.2f} GB/s",
            ]
        )
    parts.append(
        "Per replica and step. Per batch-norm layer of C channels, the all-reduces and bytes "
        "each replica contributes, traced from the layer (forward + backward, fitted on C = 3 "
        "and 5); the optimizer's gradient all-reduce, traced from a Keras `apply_gradients` "
        "step (one call with every gradient, which the strategy packs into one collective "
        "per pack, counted in the graph); and the cost of one all-reduce on this host: "
        "latency of a 4-byte one, and bandwidth of a 4 MiB one, each in a chain of dependent "
        "calls.\n"
    )
    parts.append(
        markdown_table(
            [
                "replicas",
                *(f"{RESNET_VARIANT_LABELS[v]} / layer" for v in RESNET_VARIANTS[1:]),
                "gradients (Keras optimizer)",
                "all-reduce latency",
                "all-reduce bandwidth",
            ],
            probe_rows,
        )
        + "\n"
    )
    parts.append(
        "Whole model: the sums over its batch-norm layers and its trainable variables. Floor = "
        "all-reduces x latency + bytes / bandwidth, the time the collectives take if nothing "
        "else ran (batch-norm all-reduces are sequential along the network). Measured: the "
        "variant's step time minus plain's in the ResNet table (`-` when that row was not "
        "measured). A measured overhead far above the floor is compute, not communication. "
        "= traced step: the all-reduced tensors counted while tracing the ResNet step equal "
        "the batch-norm ones plus one per gradient.\n"
    )
    table_rows = []
    for row in floor["rows"]:
        grad = row["gradient"]
        for variant, entry in row["batch_norm"].items():
            measured = entry["measured_overhead_ms"]
            agree = entry["traced_total_agrees"]
            table_rows.append(
                [
                    row["model"],
                    row["replicas"],
                    RESNET_VARIANT_LABELS[variant],
                    f"{entry['all_reduces']:g}",
                    f"{entry['bytes'] / 1e3:.1f}",
                    fmt(entry["floor_ms"], 2),
                    "-" if measured is None else fmt(measured, 1),
                    f"{grad['all_reduces']:g}",
                    f"{grad['bytes'] / 1e6:.1f}",
                    fmt(grad["floor_ms"], 1),
                    f"{entry['bytes'] / grad['bytes']:.2e}",
                    "-" if agree is None else ("yes" if agree else "NO"),
                ]
            )
    parts.append(
        markdown_table(
            [
                "model",
                "replicas",
                "batch norm",
                "BN all-reduces",
                "BN kB",
                "BN floor ms",
                "measured overhead ms",
                "gradient all-reduces",
                "gradient MB",
                "gradient floor ms",
                "BN bytes / gradient bytes",
                "= traced step",
            ],
            table_rows,
        )
        + "\n"
    )
    return "\n".join(parts)


def render_markdown(report: dict[str, Any]) -> str:
    meta = report["meta"]
    header = (
        "# Sync batch-norm benchmark\n\n"
        f"- Machine: {meta['hardware']}; {meta['cpu_count']} CPUs; {meta['platform']}\n"
        f"- TensorFlow {meta['tensorflow']}, Keras {meta['keras']}, Python {meta['python']}\n"
        f"- Date (UTC): {meta['date_utc']}\n"
        f"- Command: `{meta['command']}`\n"
        f"- Timing: {meta['reps']} interleaved repetitions of {meta['steps_per_rep']} step(s) "
        "per variant, medians. Replicas are logical devices sharing one physical device, so "
        "the times measure synchronisation cost, not speed-up.\n"
    )
    kept = meta.get("kept_sections") or {}
    if kept:
        header += "".join(
            f"- `{name}` kept from an earlier run: {info['date_utc']}, `{info['command']}`\n"
            for name, info in kept.items()
        )
    device_label = "logical GPUs on one physical GPU" if meta["device"] == "gpu" else "logical CPUs"
    parts = [header]
    if report.get("collectives"):
        parts.append(collectives_section(report["collectives"]))
    if report.get("step_time"):
        parts.append(step_time_section(report["step_time"]))
    if report.get("robustness"):
        parts.append(robustness_section(report["robustness"]))
    if report.get("resnet_step_time"):
        parts.append(resnet_section(report["resnet_step_time"], device_label))
    if report.get("multiworker"):
        parts.append(multiworker_section(report["multiworker"]))
    if report.get("floor"):
        parts.append(floor_section(report["floor"]))
    return "\n".join(parts)


# The JSON key of each section (the first three predate the others and stay as they are).
SECTION_KEYS = {
    "collectives": "collectives",
    "step_time": "step_time",
    "robustness": "robustness",
    "resnet": "resnet_step_time",
    "multiworker": "multiworker",
    "floor": "floor",
}
MULTIWORKER_TIMEOUT_S = 900.0


def kept_from_earlier(path: Path, device: str, measured: Sequence[str]) -> dict[str, Any]:
    """The sections of an existing report, for the same device, that this run does not measure."""
    if not path.exists():
        return {}
    try:
        earlier = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    meta = earlier.get("meta", {})
    if meta.get("device") != device:
        return {}
    kept = {}
    for name, key in SECTION_KEYS.items():
        if name in measured or not earlier.get(key):
            continue
        origin = (meta.get("kept_sections") or {}).get(name) or {
            "date_utc": meta.get("date_utc"),
            "command": meta.get("command"),
        }
        kept[name] = {"data": earlier[key], "origin": origin}
    return kept


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv if argv is None else argv)
    args = parse_args(argv[1:])
    config = run_config(args)
    devices, description = configure_devices(args.device, args.gpu_memory_mb)
    sections = config.sections
    counts = [config.probe_replicas]
    if "step_time" in sections:
        counts += config.replica_counts
    if "resnet" in sections:
        counts += [k for r in config.resnets for k in r.replica_counts]
    if "floor" in sections:
        counts += config.floor_replicas
    strategies = make_strategies(devices, counts)
    stem = "sync_bn" if args.device == "cpu" else "sync_bn_gpu"
    out_json = args.out / f"{stem}.json"
    started = time.perf_counter()
    report: dict[str, Any] = {}

    if "collectives" in sections:
        log(f"Collectives ({config.probe_replicas} replicas)...")
        report["collectives"] = measure_collectives(strategies[config.probe_replicas])
    if "step_time" in sections:
        log("Step times...")
        report["step_time"] = measure_step_times(strategies, config)
    if "robustness" in sections:
        log(f"Variance robustness ({config.probe_replicas} replicas)...")
        report["robustness"] = measure_variance_errors(strategies[config.probe_replicas])
    if "resnet" in sections:
        log("ResNet step times...")
        report["resnet_step_time"] = measure_resnets(strategies, config)
    if "multiworker" in sections:
        log("Two worker processes...")
        report["multiworker"] = measure_multiworker(config, timeout=MULTIWORKER_TIMEOUT_S)
    if "floor" in sections:
        log("Analytic floor...")
        resnet_rows = report.get("resnet_step_time")
        if resnet_rows is None:
            earlier = kept_from_earlier(out_json, args.device, sections).get("resnet")
            resnet_rows = earlier["data"] if earlier else []
        report["floor"] = measure_floor(strategies, config, resnet_rows)

    kept = kept_from_earlier(out_json, args.device, sections)
    for name, entry in kept.items():
        report[SECTION_KEYS[name]] = entry["data"]
    report = {
        "meta": {
            **metadata(config, description, argv),
            "sections": list(sections),
            "kept_sections": {name: entry["origin"] for name, entry in kept.items()},
            "elapsed_s": round(time.perf_counter() - started, 1),
        },
        **{key: report[key] for key in SECTION_KEYS.values() if key in report},
    }
    log("Done.")
    markdown = render_markdown(report)
    print()
    print(markdown)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.md").write_text(markdown)
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {args.out / f'{stem}.md'} and {args.out / f'{stem}.json'}")
    return report


if __name__ == "__main__":
    main()
