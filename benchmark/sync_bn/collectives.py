"""Section `collectives` of `benchmark.sync_bn`: collectives, bytes and ops per layer.

Counted from the traced graph of a forward + `tape.gradient` step (nested
function graphs included), with `tensorflow_similarity.testing`'s definition
of a collective, and cross-checked with a trace-time counter around
`tf.distribute.ReplicaContext.all_reduce`, at 2, 4 and 8 replicas. The bytes
are those of the collective ops' inputs in the graph, fitted as
`per_channel * C + fixed` on two layer widths, forward and backward apart.
Targets: ours <= 2 collectives; forward bytes constant in the number of
replicas on ours' default ("reduce") path; fewer added ops than Keras'.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from benchmark.common import markdown_table
from benchmark.sync_bn.common import (
    VARIANT_LABELS,
    VARIANTS,
    AllReduceCounter,
    RunConfig,
    fmt,
    log,
    make_batch_norm,
    markdown_section,
)
from tensorflow_similarity.testing import graph_op_types, is_collective, is_setup_op

# Ops that do no work at run time, left out of the "other ops" column.
FREE_OPS = frozenset({"Const", "Identity", "IdentityN", "NoOp", "Placeholder"})
# The layer widths on which the bytes are fitted; the op counts are those of the first.
WIDTHS = (4, 6)


def count_graph_ops(graph: tf.Graph) -> tuple[int, int]:
    """Counts ops in `graph` and its nested function graphs.

    Returns:
        `(collectives, compute)`: data-moving collective ops, and every other op
        that does work at run time (constants, placeholders, identities,
        no-ops and collective set-up ops excluded).
    """
    op_types = graph_op_types(graph)
    collectives = sum(1 for op_type in op_types if is_collective(op_type))
    compute = sum(
        1
        for op_type in op_types
        if op_type not in FREE_OPS and not is_collective(op_type) and not is_setup_op(op_type)
    )
    return collectives, compute


def collective_bytes(graph: tf.Graph) -> int:
    """Bytes of the data the collective ops of `graph` send: their first input, static shape.

    Raises:
        ValueError: If a collective lies in a nested function (whose shapes the
            graph does not hold) or its input shape is not static.
    """
    total, found = 0, 0
    for op in graph.get_operations():
        if not is_collective(op.type):
            continue
        tensor = op.inputs[0]
        if not tensor.shape.is_fully_defined():
            raise ValueError(f"{op.name} ({op.type}) has no static input shape: {tensor.shape}")
        total += tensor.shape.num_elements() * tensor.dtype.size
        found += 1
    nested = count_graph_ops(graph)[0] - found
    if nested:
        raise ValueError(f"{nested} collective(s) lie in nested functions; their bytes are unknown")
    return total


def trace_variant(
    strategy: tf.distribute.MirroredStrategy, variant: str, num_batch_norm: int, width: int
) -> dict[str, Any]:
    """Traces forward and forward + backward of `num_batch_norm` Dense -> batch norm layers."""
    x = tf.ones((2 * width, width))
    with strategy.scope():
        layers = [keras.Input((width,))]
        for _ in range(num_batch_norm):
            layers += [keras.layers.Dense(width), make_batch_norm(variant)]
        model = keras.Sequential(layers)

    @tf.function
    def forward(x):
        return strategy.run(lambda x: model(x, training=True), args=(x,))

    @tf.function
    def forward_backward(x):
        def replica_fn(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(model(x, training=True)))
            return tape.gradient(loss, model.trainable_variables)

        return strategy.run(replica_fn, args=(x,))

    with AllReduceCounter() as forward_counter:
        forward_graph = forward.get_concrete_function(x).graph
    with AllReduceCounter() as step_counter:
        step_graph = forward_backward.get_concrete_function(x).graph
    forward_collectives, forward_compute = count_graph_ops(forward_graph)
    step_collectives, step_compute = count_graph_ops(step_graph)
    return {
        "forward_graph": forward_collectives,
        "step_graph": step_collectives,
        "forward_compute": forward_compute,
        "step_compute": step_compute,
        "forward_trace": forward_counter.tensors,
        "step_trace": step_counter.tensors,
        "forward_bytes": collective_bytes(forward_graph),
        "step_bytes": collective_bytes(step_graph),
    }


def measure_replicas(
    strategy: tf.distribute.MirroredStrategy, num_batch_norm: int = 3
) -> list[dict[str, Any]]:
    """One row per variant at this strategy's replica count.

    The step is a bare `tape.gradient` (no optimizer), because gradient
    all-reduce of trainable variables belongs to the optimizer, not to the
    batch-norm layer. Plain batch norm's counts (the model without any
    synchronised layer) are subtracted before dividing by the number of layers.
    """
    replicas = strategy.num_replicas_in_sync
    raw = {
        width: {v: trace_variant(strategy, v, num_batch_norm, width) for v in VARIANTS}
        for width in WIDTHS
    }
    keras.backend.clear_session()

    def per_layer(variant: str, key: str, width: int = WIDTHS[0]) -> float:
        traced = raw[width]
        return (traced[variant][key] - traced["plain"][key]) / (replicas * num_batch_norm)

    def fitted_bytes(variant: str, key: str) -> dict[str, float]:
        low, high = (per_layer(variant, key, width) for width in WIDTHS)
        per_channel = (high - low) / (WIDTHS[1] - WIDTHS[0])
        return {"per_channel": per_channel, "fixed": low - per_channel * WIDTHS[0]}

    rows = []
    for variant in VARIANTS:
        traced = raw[WIDTHS[0]][variant]
        forward = per_layer(variant, "forward_graph")
        total = per_layer(variant, "step_graph")
        forward_bytes = fitted_bytes(variant, "forward_bytes")
        step_bytes = fitted_bytes(variant, "step_bytes")
        forward_ops = per_layer(variant, "forward_compute")
        step_ops = per_layer(variant, "step_compute")
        rows.append(
            {
                "variant": variant,
                "replicas": replicas,
                "batch_norm_layers": num_batch_norm,
                "channels": WIDTHS[0],
                "graph_ops_forward": traced["forward_graph"],
                "graph_ops_step": traced["step_graph"],
                "forward_per_layer": forward,
                "backward_per_layer": total - forward,
                "total_per_layer": total,
                "trace_counter_per_layer": per_layer(variant, "step_trace"),
                "extra_compute_ops_per_layer": step_ops,
                "extra_compute_ops_forward": forward_ops,
                "extra_compute_ops_backward": step_ops - forward_ops,
                "forward_bytes": forward_bytes,
                "backward_bytes": {
                    key: step_bytes[key] - forward_bytes[key] for key in ("per_channel", "fixed")
                },
                "counts_agree": all(
                    raw[w][variant]["step_graph"] == raw[w][variant]["step_trace"]
                    and raw[w][variant]["forward_graph"] == raw[w][variant]["forward_trace"]
                    for w in WIDTHS
                ),
            }
        )
    return rows


def measure(
    strategies: dict[int, tf.distribute.MirroredStrategy], config: RunConfig
) -> list[dict[str, Any]]:
    """Rows of every variant at each of `config.collective_replicas`."""
    rows = []
    for replicas in config.collective_replicas:
        log(f"  collectives, {replicas} replicas...")
        rows += measure_replicas(strategies[replicas])
    return rows


def bytes_text(fit: dict[str, float]) -> str:
    """`a B x C + b B`, the fitted bytes per layer of C channels."""
    text = f"{fit['per_channel']:g} B x C" if fit["per_channel"] else ""
    if fit["fixed"]:
        text += (" + " if text else "") + f"{fit['fixed']:g} B"
    return text or "0"


def constant_in_replicas(rows: list[dict[str, Any]], variant: str) -> bool | None:
    """Whether `variant`'s forward bytes per layer are the same at every replica count."""
    fits = [r["forward_bytes"] for r in rows if r["variant"] == variant]
    if len(fits) < 2:
        return None
    return all(fit == fits[0] for fit in fits)


def render(rows: list[dict[str, Any]]) -> str:
    # The op and collective counts at the largest count measured up to 4 replicas,
    # the probe of earlier reports.
    probe = max(r["replicas"] for r in rows if r["replicas"] <= 4) if rows else 0
    at_probe = [r for r in rows if r["replicas"] == probe]
    row = {r["variant"]: r for r in at_probe}
    table = markdown_table(
        [
            "layer",
            "forward / layer",
            "backward / layer",
            "total / layer",
            "trace counter / layer",
            "graph = counter",
            "other ops / layer",
            "other ops forward / backward",
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
                f"{fmt(r['extra_compute_ops_forward'], 1)} / "
                f"{fmt(r['extra_compute_ops_backward'], 1)}",
            ]
            for r in at_probe
        ],
    )
    ours, keras_row = row["ours"], row["keras"]
    met = "met" if ours["total_per_layer"] <= 2 else "NOT met"
    fewer = all(
        row[v]["extra_compute_ops_per_layer"] < keras_row["extra_compute_ops_per_layer"]
        for v in ("ours", "ours_gather")
        if v in row
    )
    counts = markdown_section(
        "Collectives per batch-norm layer per training step",
        f"Counted from the traced graph of a forward + `tape.gradient` step ({probe} "
        f"replicas, {ours['batch_norm_layers']} Dense + batch-norm layers, nested function "
        "graphs included), per replica, minus plain batch norm's count, per layer. Gradient "
        "all-reduce of trainable variables is the optimizer's and is not in this step. The "
        "trace counter counts tensors passed to `ReplicaContext.all_reduce` while tracing. "
        "Other ops: non-collective ops added over plain batch norm (constants and "
        "identities excluded), per replica and layer, static shapes; they include the "
        "strategy's own packing around each all-reduce (about 5 ops each). Ours is the "
        'default layer (`exchange="auto"`: the constant-size "reduce" path on CPUs and GPUs).',
        table,
        f"Target ours <= 2: **{met}** (ours {fmt(ours['total_per_layer'], 0)}, Keras "
        f"{fmt(keras_row['total_per_layer'], 0)}). Target fewer added ops per layer than "
        f"Keras': **{'met' if fewer else 'NOT met'}** ("
        + ", ".join(
            f"{VARIANT_LABELS[v]} {fmt(row[v]['extra_compute_ops_per_layer'], 1)}"
            for v in ("ours", "ours_gather", "keras")
            if v in row
        )
        + ").",
    )
    by_replicas = markdown_table(
        [
            "layer",
            "replicas",
            "forward collectives",
            "forward bytes",
            "backward collectives",
            "backward bytes",
            "bytes at C = 256",
        ],
        [
            [
                VARIANT_LABELS[r["variant"]],
                r["replicas"],
                fmt(r["forward_per_layer"], 0),
                bytes_text(r["forward_bytes"]),
                fmt(r["backward_per_layer"], 0),
                bytes_text(r["backward_bytes"]),
                f"{sum(256 * b['per_channel'] + b['fixed'] for b in (r['forward_bytes'], r['backward_bytes'])):,.0f}",  # noqa: E501
            ]
            for r in rows
            if r["variant"] != "plain"
        ],
    )
    constant = constant_in_replicas(rows, "ours")
    verdict = (
        "not measured (one replica count)"
        if constant is None
        else ("**met**" if constant else "**NOT met**")
    )
    scaling = markdown_section(
        "Collective bytes per batch-norm layer, by replica count",
        "Bytes each replica sends per layer of C channels, from the input shapes of the "
        "collective ops in the traced graph (forward graph; forward + backward graph minus "
        f"it), fitted on C = {WIDTHS[0]} and {WIDTHS[1]}. Ours sums `2 C + 1` float64 "
        "values forward whatever the number of replicas; the gather path sends one float32 "
        "row of `4 C` per replica (as a zero-padded all-reduce: `16 C K` bytes); Keras "
        "all-reduces three float32 vectors forward.",
        by_replicas,
        f"Target forward bytes per layer constant in the number of replicas (ours): {verdict}.",
    )
    return counts + "\n" + scaling
