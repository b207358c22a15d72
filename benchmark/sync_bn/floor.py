"""Section `floor` of `benchmark.sync_bn`: the analytic floor of synchronised batch norm.

All-reduces and bytes per replica per step of each synchronised batch norm
(traced from the layers, not hard-coded) against the optimizer's gradient
all-reduce of the same model, the time they take at the measured all-reduce
latency and bandwidth of this host, and the overhead measured in the ResNet
section. `floor_scaling.py` extrapolates the bytes to many replicas and
`floor_tables.py` renders the section.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from benchmark.sync_bn.common import (
    AllReduceCounter,
    RunConfig,
    log,
    make_batch_norm,
    per_replica_constant,
)
from benchmark.sync_bn.floor_scaling import scaling_model
from benchmark.sync_bn.resnet import build_resnet_variant, model_structure, resnet_variants
from tensorflow_similarity.testing import count_collectives


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
                [keras.Input((channels,)), keras.layers.Dense(channels), make_batch_norm(variant)]
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
    graph_collectives = count_collectives(graph)
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


def measure(
    strategies: dict[int, tf.distribute.MirroredStrategy],
    config: RunConfig,
    resnet_rows: Sequence[dict[str, Any]],
    resnet_origin: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Collectives and bytes per step, sync batch norm vs gradient all-reduce, per model.

    Args:
        strategies: A strategy for each of `config.floor_replicas`.
        config: The run's configuration; its `resnets` are the models.
        resnet_rows: The ResNet section's rows, measured now or kept from an earlier run,
            for the measured overhead column (empty if there are none).
        resnet_origin: Date and command of those rows when kept from an earlier run.
    """
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
                    entry["measured_over_floor"] = entry["measured_overhead_ms"] / max(
                        entry["floor_ms"], 1e-9
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
    log("  floor: scaling model of ResNet-50 (keras.applications) to 256 replicas...")
    reference = model_structure(keras.applications.ResNet50(weights=None))
    keras.backend.clear_session()
    return {
        "probes": per_replica_count,
        "rows": rows,
        "measured_from": resnet_origin,
        "scaling": scaling_model(per_replica_count, reference, config.model_replicas),
    }
