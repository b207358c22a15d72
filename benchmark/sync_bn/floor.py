"""Section `floor` of `benchmark.sync_bn`: the analytic floor of synchronised batch norm.

All-reduces and bytes per replica per step of each synchronised batch norm
(traced from the layers, not hard-coded) against the optimizer's gradient
all-reduce of the same model, the time they take at the measured all-reduce
latency and bandwidth of this host, and the overhead measured in the ResNet
section.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from benchmark.common import markdown_table
from benchmark.sync_bn.common import (
    RESNET_VARIANT_LABELS,
    RESNET_VARIANTS,
    AllReduceCounter,
    RunConfig,
    fmt,
    log,
    make_batch_norm,
    markdown_section,
    per_replica_constant,
)
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


SCALING_VARIANTS = ("keras", "ours", "ours_gather")


def scaling_model(
    probes: Sequence[dict[str, Any]], structure: dict[str, Any], replica_counts: Sequence[int]
) -> dict[str, Any]:
    """Batch-norm all-reduces and bytes per replica per step of a model, extrapolated in K.

    Each variant's traced bytes per layer, `per_channel * C + fixed` at each
    probed replica count, are modelled as linear in the replica count `K`
    (through the smallest and largest probe; `exact` says whether the probes in
    between lie on the line), then summed over the model's batch-norm layers
    for every count in `replica_counts`. The gradient all-reduce is 4 bytes
    per trainable parameter whatever `K`.

    Args:
        probes: The floor's per-replica-count probes (at least two counts).
        structure: `model_structure` of the model.
        replica_counts: Replica counts to model.

    Returns:
        The model's structure, each variant's fit and a row per replica count.
    """
    counts = [p["replicas"] for p in probes]
    fits = {}
    for variant in SCALING_VARIANTS:
        points = [(p["replicas"], p["per_layer"][variant]) for p in probes]
        (k0, low), (k1, high) = points[0], points[-1]
        fit = {"all_reduces": low["all_reduces"]}
        for key in ("bytes_per_channel", "fixed_bytes"):
            slope = (high[key] - low[key]) / (k1 - k0) if k1 != k0 else 0.0
            fit[key] = {"per_replica": slope, "constant": low[key] - slope * k0}
        fit["exact"] = (
            len(points) > 1
            and all(
                abs(_fitted(fit, key, k) - layer[key]) < 1e-9
                for k, layer in points
                for key in ("bytes_per_channel", "fixed_bytes")
            )
            and all(layer["all_reduces"] == fit["all_reduces"] for _, layer in points)
        )
        fits[variant] = fit
    gradient_bytes = 4 * structure["trainable_parameters"]
    rows = []
    for replicas in replica_counts:
        variants = {}
        for variant, fit in fits.items():
            payload = (
                _fitted(fit, "bytes_per_channel", replicas) * structure["batch_norm_channels"]
                + _fitted(fit, "fixed_bytes", replicas) * structure["batch_norm_layers"]
            )
            variants[variant] = {
                "all_reduces": fit["all_reduces"] * structure["batch_norm_layers"],
                "bytes": payload,
                "over_gradient": payload / gradient_bytes,
            }
        rows.append(
            {"replicas": replicas, "gradient_bytes": gradient_bytes, "batch_norm": variants}
        )
    return {
        "model": "ResNet-50 (keras.applications, 1000 classes)",
        "probe_replicas": counts,
        "batch_norm_layers": structure["batch_norm_layers"],
        "batch_norm_channels": structure["batch_norm_channels"],
        "trainable_parameters": structure["trainable_parameters"],
        "fits": fits,
        "rows": rows,
    }


def _fitted(fit: dict[str, Any], key: str, replicas: int) -> float:
    return fit[key]["constant"] + fit[key]["per_replica"] * replicas


def _probe_cells(probe: dict[str, Any]) -> list[Any]:
    layer = probe["per_layer"]
    rule = probe["gradient_rule"]
    return [
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


def _model_cells(row: dict[str, Any], variant: str, entry: dict[str, Any]) -> list[Any]:
    grad = row["gradient"]
    measured = entry["measured_overhead_ms"]
    agree = entry["traced_total_agrees"]
    return [
        row["model"],
        row["replicas"],
        RESNET_VARIANT_LABELS[variant],
        f"{entry['all_reduces']:g}",
        f"{entry['bytes'] / 1e3:.1f}",
        fmt(entry["floor_ms"], 2),
        "-" if measured is None else fmt(measured, 1),
        "-" if measured is None else fmt(entry["measured_over_floor"], 2),
        f"{grad['all_reduces']:g}",
        f"{grad['bytes'] / 1e6:.1f}",
        fmt(grad["floor_ms"], 1),
        f"{entry['bytes'] / grad['bytes']:.2e}",
        "-" if agree is None else ("yes" if agree else "NO"),
    ]


def render(floor: dict[str, Any]) -> str:
    probe_table = markdown_table(
        [
            "replicas",
            *(f"{RESNET_VARIANT_LABELS[v]} / layer" for v in RESNET_VARIANTS[1:]),
            "gradients (Keras optimizer)",
            "all-reduce latency",
            "all-reduce bandwidth",
        ],
        [_probe_cells(probe) for probe in floor["probes"]],
    )
    model_table = markdown_table(
        [
            "model",
            "replicas",
            "batch norm",
            "BN all-reduces",
            "BN kB",
            "BN floor ms",
            "measured overhead ms",
            "measured / floor",
            "gradient all-reduces",
            "gradient MB",
            "gradient floor ms",
            "BN bytes / gradient bytes",
            "= traced step",
        ],
        [
            _model_cells(row, variant, entry)
            for row in floor["rows"]
            for variant, entry in row["batch_norm"].items()
        ],
    )
    return markdown_section(
        "Analytic floor: all-reduces and bytes per training step",
        "Per replica and step. Per batch-norm layer of C channels, the all-reduces and bytes "
        "each replica contributes, traced from the layer (forward + backward, fitted on C = 3 "
        "and 5); the optimizer's gradient all-reduce, traced from a Keras `apply_gradients` "
        "step (one call with every gradient, which the strategy packs into one collective "
        "per pack, counted in the graph); and the cost of one all-reduce on this host: "
        "latency of a 4-byte one, and bandwidth of a 4 MiB one, each in a chain of dependent "
        "calls.",
        probe_table,
        "Whole model: the sums over its batch-norm layers and its trainable variables. Floor = "
        "all-reduces x latency + bytes / bandwidth, the time the collectives take if nothing "
        "else ran (batch-norm all-reduces are sequential along the network). Measured: the "
        "variant's step time minus plain's in the ResNet table (`-` when that row was not "
        "measured"
        + (
            f"; kept from the earlier run {floor['measured_from']['date_utc']}, "
            f"`{floor['measured_from']['command']}`, which measured the layer as it was then"
            if floor.get("measured_from")
            else ""
        )
        + "). A measured overhead far above the floor is compute, not communication. "
        "= traced step: the all-reduced tensors counted while tracing the ResNet step equal "
        "the batch-norm ones plus one per gradient.",
        model_table,
        *(scaling_blocks(floor["scaling"]) if floor.get("scaling") else []),
    )


def scaling_blocks(scaling: dict[str, Any]) -> list[str]:
    """The scaling model's paragraph, table and verdicts, for `render`."""
    rows = scaling["rows"]
    table = markdown_table(
        [
            "replicas",
            *(f"{RESNET_VARIANT_LABELS[v]} MB" for v in SCALING_VARIANTS),
            "gradient MB",
            *(f"{RESNET_VARIANT_LABELS[v]} / gradient" for v in SCALING_VARIANTS),
        ],
        [
            [
                r["replicas"],
                *(f"{r['batch_norm'][v]['bytes'] / 1e6:.2f}" for v in SCALING_VARIANTS),
                f"{r['gradient_bytes'] / 1e6:.1f}",
                *(f"{100 * r['batch_norm'][v]['over_gradient']:.1f}%" for v in SCALING_VARIANTS),
            ]
            for r in rows
        ],
    )
    fits = scaling["fits"]
    fit_text = "; ".join(
        f"{RESNET_VARIANT_LABELS[v]}: ({fits[v]['bytes_per_channel']['constant']:g} + "
        f"{fits[v]['bytes_per_channel']['per_replica']:g} K) B x C + "
        f"({fits[v]['fixed_bytes']['constant']:g} + {fits[v]['fixed_bytes']['per_replica']:g} K)"
        f" B, {fits[v]['all_reduces']} all-reduces"
        + ("" if fits[v]["exact"] else " (**probes off the line**)")
        for v in SCALING_VARIANTS
    )
    crossing = next(
        (r["replicas"] for r in rows if r["batch_norm"]["ours_gather"]["over_gradient"] >= 1), None
    )
    ours = [r["batch_norm"]["ours"]["bytes"] for r in rows]
    return [
        f"### Batch-norm bytes per step from 2 to {rows[-1]['replicas']} replicas: "
        f"{scaling['model']}",
        f"{scaling['model']}: {scaling['batch_norm_layers']} batch-norm layers, "
        f"{scaling['batch_norm_channels']:,} channels, "
        f"{scaling['trainable_parameters'] / 1e6:.1f} M trainable parameters. "
        "Bytes each replica sends per step (forward + backward), "
        "from each layer's traced bytes at "
        f"{', '.join(str(k) for k in scaling['probe_replicas'])} replicas, modelled as linear "
        f"in the replica count K: {fit_text}. Gradient: one packed float32 all-reduce of every "
        "parameter. A ring all-reduce moves about twice its payload per replica, whatever "
        "the kind, so the ratios hold on the wire.",
        table,
        "Ours' batch-norm bytes per step are "
        + (
            "the same at every replica count"
            if max(ours) == min(ours)
            else f"from {min(ours) / 1e6:.2f} to {max(ours) / 1e6:.2f} MB"
        )
        + f" ({ours[0] / 1e6:.2f} MB, {100 * rows[0]['batch_norm']['ours']['over_gradient']:.1f}%"
        " of the gradient all-reduce); the gather path's grow with K"
        + (f" and exceed the gradient all-reduce from {crossing} replicas." if crossing else "."),
    ]
