"""Section `collectives` of `benchmark/sync_bn.py`: collectives per batch-norm layer per step.

Counted from the traced graph of a forward + `tape.gradient` step (nested
function graphs included), with `tensorflow_similarity.testing`'s definition
of a collective, and cross-checked with a trace-time counter around
`tf.distribute.ReplicaContext.all_reduce`. Target: ours <= 2.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from benchmark_common import markdown_table
from sync_bn_common import (
    VARIANT_LABELS,
    VARIANTS,
    AllReduceCounter,
    fmt,
    make_batch_norm,
    markdown_section,
)

from tensorflow_similarity.testing import graph_op_types, is_collective, is_setup_op

# Ops that do no work at run time, left out of the "other ops" column.
FREE_OPS = frozenset({"Const", "Identity", "IdentityN", "NoOp", "Placeholder"})


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


def measure(
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


def render(rows: list[dict[str, Any]]) -> str:
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
    return markdown_section(
        "Collectives per batch-norm layer per training step",
        f"Counted from the traced graph of a forward + `tape.gradient` step ({ours['replicas']} "
        f"replicas, {ours['batch_norm_layers']} Dense + batch-norm layers, nested function "
        "graphs included), per replica, minus plain batch norm's count, per layer. Gradient "
        "all-reduce of trainable variables is the optimizer's and is not in this step. The "
        "trace counter counts tensors passed to `ReplicaContext.all_reduce` while tracing. "
        "Other ops: non-collective ops added over plain batch norm (constants and "
        "identities excluded), per replica and layer.",
        table,
        f"Target ours <= 2: **{met}** (ours {fmt(ours['total_per_layer'], 0)}, Keras "
        f"{fmt(keras_row['total_per_layer'], 0)}).",
    )
