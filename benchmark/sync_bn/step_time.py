"""Section `step_time` of `benchmark.sync_bn`: training step time of a small ResNet.

Forward, backward and SGD update with 1, 2, 4, 8 replicas, as ratios to plain
batch norm, in a latency-bound setting (8x8 images, many thin batch-norm
layers) and a compute-bound one (32x32 images, wider convolutions, larger
batch). Target: our overhead (ratio - 1) at most half of Keras'.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from benchmark.sync_bn.common import (
    VARIANTS,
    RunConfig,
    Setting,
    fmt,
    grouped_tables,
    log,
    make_batch_norm,
    markdown_section,
    paired_ratio,
    per_replica_constant,
    time_interleaved,
)

# Relative step-time noise on a shared 2-core host: with one replica, plain and
# ours run the same code, yet their times differ by up to ~5 %.
NOISE = 0.05


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


def measure(
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
            gather_ratio = paired_ratio(times["ours_gather"], times["plain"])
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
                    "gather_over_plain": gather_ratio,
                    "gather_overhead_ratio": overhead_ratio(gather_ratio - 1.0, keras_ratio - 1.0),
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


def overhead_ratio(ours_overhead: float, keras_overhead: float) -> float | None:
    """Ours' overhead over Keras'; `None` where Keras' overhead is within timing noise."""
    if keras_overhead <= NOISE:
        return None
    return ours_overhead / keras_overhead


def optional(value: float | None, digits: int) -> str:
    return "-" if value is None else fmt(value, digits)


def render(rows: list[dict[str, Any]]) -> str:
    def heading(first: dict[str, Any]) -> str:
        return (
            f"{first['setting']}: {first['image_size']}x{first['image_size']} images, "
            f"{first['channels']} channels, {first['batch_norm_layers']} batch-norm layers, "
            f"{first['batch_per_replica']} images per replica"
        )

    def cells(r: dict[str, Any]) -> list[Any]:
        ratio = r["overhead_ratio"]
        verdict = "n/a" if ratio is None else ("yes" if ratio <= 0.5 else "no")
        return [
            r["replicas"],
            fmt(r["median_ms"]["plain"], 1),
            fmt(r["median_ms"]["keras"], 1),
            fmt(r["median_ms"]["ours"], 1),
            # Rows measured before the gather path was timed lack its columns.
            optional(r["median_ms"].get("ours_gather"), 1),
            fmt(r["keras_over_plain"], 3),
            fmt(r["ours_over_plain"], 3),
            optional(r.get("gather_over_plain"), 3),
            "n/a" if ratio is None else fmt(ratio, 2),
            verdict,
            " / ".join(optional(r["first_step_s"].get(v), 1) for v in VARIANTS),
        ]

    header = [
        "replicas",
        "plain ms",
        "Keras-synced ms",
        "ours ms",
        'ours `exchange="gather"` ms',
        "Keras / plain",
        "ours / plain",
        "gather / plain",
        "ours overhead / Keras overhead",
        "target met",
        "first step s (plain / Keras / ours / gather)",
    ]
    ratios = [r["overhead_ratio"] for r in rows if r["overhead_ratio"] is not None]
    met = sum(ratio <= 0.5 for ratio in ratios)
    return markdown_section(
        "Training step time under MirroredStrategy",
        "Median ms per step (forward, backward, SGD update) of a ResNet-style model, the four "
        "variants with identical weights, interleaved within every repetition. Ratios to plain "
        "are medians of the per-repetition ratios; overhead = ratio - 1. Target: ours' "
        "overhead at most half of Keras' (overhead ratio <= 0.5); `n/a` where Keras' overhead "
        f"is under {NOISE:.0%} (timing noise). First step: tracing, graph optimisation and "
        "one step, in seconds.",
        *grouped_tables(rows, "setting", heading, header, cells),
        f"Target met in {met} of the {len(ratios)} rows where Keras' overhead is measurable.",
    )
