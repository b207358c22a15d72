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

The replicas are logical devices carved out of one physical device (8 logical
CPUs by default; `--device gpu` splits the first GPU into 8 logical GPUs), so
step times measure the synchronisation cost, not a speed-up. On a CPU host the
replicas share the cores: timings are noisy, which is why the three variants
are interleaved within every repetition and medians are reported.

Usage:

    python benchmark/sync_bn.py                 # full run, ~10 minutes on 2 cores
    python benchmark/sync_bn.py --quick         # smoke run, under a minute
    python benchmark/sync_bn.py --device gpu    # logical GPUs on one physical GPU
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

from tensorflow_similarity.layers import SyncBatchNormalization  # noqa: E402

NUM_LOGICAL_DEVICES = 8
VARIANTS = ("plain", "keras", "ours")
VARIANT_LABELS = {
    "plain": "plain `BatchNormalization`",
    "keras": "Keras `BatchNormalization(synchronized=True)`",
    "ours": "ours `SyncBatchNormalization`",
}
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


LATENCY_BOUND = Setting("latency-bound", image_size=8, channels=8, blocks=5, batch_per_replica=8)
COMPUTE_BOUND = Setting("compute-bound", image_size=32, channels=32, blocks=2, batch_per_replica=16)


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
    return parser.parse_args(argv)


def run_config(args: argparse.Namespace) -> RunConfig:
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
        )
    return RunConfig(
        device=args.device,
        replica_counts=(1, 2, 4, 8),
        reps=15,
        steps_per_rep=2,
        warmup_steps=2,
        probe_replicas=4,
        quick=False,
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
        self._lock = threading.Lock()
        self._original = None

    def __enter__(self) -> AllReduceCounter:
        original = tf.distribute.ReplicaContext.all_reduce
        counter = self

        def counting_all_reduce(ctx, reduce_op, value, options=None):
            with counter._lock:
                counter.tensors += len(tf.nest.flatten(value))
            return original(ctx, reduce_op, value, options)

        self._original = original
        tf.distribute.ReplicaContext.all_reduce = counting_all_reduce
        return self

    def __exit__(self, *exc_info: object) -> None:
        tf.distribute.ReplicaContext.all_reduce = self._original


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
    }


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


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
    return "\n".join(
        [
            header,
            collectives_section(report["collectives"]),
            step_time_section(report["step_time"]),
            robustness_section(report["robustness"]),
        ]
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv if argv is None else argv)
    args = parse_args(argv[1:])
    config = run_config(args)
    devices, description = configure_devices(args.device, args.gpu_memory_mb)
    strategies = make_strategies(devices, [*config.replica_counts, config.probe_replicas])
    started = time.perf_counter()

    log(f"Collectives ({config.probe_replicas} replicas)...")
    collectives_rows = measure_collectives(strategies[config.probe_replicas])
    log("Step times...")
    step_rows = measure_step_times(strategies, config)
    log(f"Variance robustness ({config.probe_replicas} replicas)...")
    robustness_rows = measure_variance_errors(strategies[config.probe_replicas])

    report = {
        "meta": {
            **metadata(config, description, argv),
            "elapsed_s": round(time.perf_counter() - started, 1),
        },
        "collectives": collectives_rows,
        "step_time": step_rows,
        "robustness": robustness_rows,
    }
    log("Done.")
    markdown = render_markdown(report)
    print()
    print(markdown)

    args.out.mkdir(parents=True, exist_ok=True)
    stem = "sync_bn" if args.device == "cpu" else "sync_bn_gpu"
    (args.out / f"{stem}.md").write_text(markdown)
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {args.out / f'{stem}.md'} and {args.out / f'{stem}.json'}")
    return report


if __name__ == "__main__":
    main()
