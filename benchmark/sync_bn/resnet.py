"""Section `resnet` of `benchmark.sync_bn`: ResNet-18/50 step time and throughput.

Step time and images/second of `ResNet18Sim` (16x16 images, CIFAR stem) and
`ResNet50Sim` (32x32) at 1, 2, 4, 8 replicas, 2 images per replica: plain,
Keras-synchronised, ours, and ours with `group_size=2`, with ratios to plain.
The training step built here also serves the two-worker section
(`worker.py`) and the analytic floor.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from benchmark.sync_bn.common import (
    RESNET_VARIANT_LABELS,
    RESNET_VARIANTS,
    VARIANTS,
    AllReduceCounter,
    ResNetSetting,
    RunConfig,
    fmt,
    grouped_tables,
    log,
    markdown_section,
    per_replica_constant,
    ratios_to_plain,
    time_interleaved,
)
from tensorflow_similarity.architectures import ResNet18Sim, ResNet50Sim
from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.layer_walk import all_layers
from tensorflow_similarity.layers import SyncBatchNormalization


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


def gather_exchange(model: keras.Model) -> keras.Model:
    """A copy of `model` whose `SyncBatchNormalization` layers use `exchange="gather"`."""

    def clone(layer: keras.layers.Layer) -> keras.layers.Layer:
        config = layer.get_config()
        if type(layer) is SyncBatchNormalization:
            return SyncBatchNormalization(**{**config, "exchange": "gather"})
        return type(layer).from_config(config)

    copy = keras.models.clone_model(model, clone_function=clone, recursive=True)
    copy.set_weights(model.get_weights())
    return copy


def build_resnet_variant(setting: ResNetSetting, variant: str) -> keras.Model:
    """The setting's backbone with the similarity head and the variant's batch norm."""
    builder = {"ResNet-18": ResNet18Sim, "ResNet-50": ResNet50Sim}[setting.name]
    sync_bn = {
        "plain": False,
        "keras": False,
        "ours": True,
        "ours_gather": True,
        "ours_g2": GroupSyncBatchNorm(2),
    }
    model = builder((setting.image_size, setting.image_size, 3), sync_bn=sync_bn[variant])
    if variant == "keras":
        return keras_synchronized(model)
    return gather_exchange(model) if variant == "ours_gather" else model


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


def measure(
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


def render(rows: list[dict[str, Any]], device_label: str) -> str:
    def heading(first: dict[str, Any]) -> str:
        return (
            f"{first['model']}: {first['image_size']}x{first['image_size']} images, "
            f"{first['batch_per_replica']} per replica, {first['batch_norm_layers']} batch-norm "
            f"layers, {first['trainable_parameters'] / 1e6:.1f} M trainable parameters, "
            f"{len(first['times_ms']['plain'])} timed steps per variant"
        )

    def cells(r: dict[str, Any]) -> list[Any]:
        timed = [
            f"{r['median_ms'][v]:.0f} ms, {r['images_per_s'][v]:.1f} img/s"
            + ("" if v == "plain" else f", x{r['over_plain'][v]:.2f}")
            if v in r["median_ms"]
            else "n/a"
            for v in RESNET_VARIANTS
        ]
        build_s = " / ".join(fmt(r["trace_s"][v] + r["first_step_s"][v], 0) for v in r["median_ms"])
        return [r["replicas"], r["global_batch"], *timed, build_s]

    header = [
        "replicas",
        "global batch",
        *(RESNET_VARIANT_LABELS[v] for v in RESNET_VARIANTS),
        "build s (" + " / ".join(RESNET_VARIANTS) + ")",
    ]
    return markdown_section(
        f"ResNet step time and throughput ({device_label})",
        "Median ms per training step (forward, backward, SGD update of every weight) and "
        "images per second of the similarity model (backbone, GeM pooling, 128-d embedding), "
        "all variants with identical weights, interleaved within every repetition. Tiny "
        "images and 2 images per replica: on a small host, graph construction, not arithmetic, "
        "limits what can be measured, and the step of a synchronised ResNet-50 at 8 replicas "
        "takes minutes to build. Ratios to plain are medians of per-repetition ratios. "
        "`group_size=2` is timed only with more than 2 replicas (with 2 it is ours). Build s: "
        "tracing + the first step (graph optimisation), per variant.",
        *grouped_tables(rows, "model", heading, header, cells),
    )
