"""What counts as a collective in a traced TensorFlow graph, for tests and benchmarks.

A collective is an op that moves tensor data between replicas: TensorFlow's
`Collective*` ops (reduce, gather, broadcast, all-to-all, ...) and NCCL's
`Nccl*` ops. Two op types share the `Collective` prefix but carry no data:
`CollectiveAssignGroupV2` (which replicas form a group) and
`CollectiveInitializeCommunicator` (communicator set-up). They are set-up ops
and are not counted, so a count is the number of data exchanges a step makes:
one op per `ReplicaContext.all_reduce` and replica, two per `all_gather` and
replica (the replicas' row counts, then the rows).

Example:

    def replica_fn(x):
        return tf.distribute.get_replica_context().all_reduce("sum", x)

    step = tf.function(lambda x: strategy.run(replica_fn, args=(x,)))
    count_collectives(step.get_concrete_function(x))  # one per replica
"""

from __future__ import annotations

import tensorflow as tf

COLLECTIVE_OP_PREFIXES = ("Collective", "Nccl")
SETUP_OP_TYPES = frozenset({"CollectiveAssignGroupV2", "CollectiveInitializeCommunicator"})

Traced = tf.Graph | tf.types.experimental.ConcreteFunction


def is_collective(op_type: str) -> bool:
    """Whether an op of type `op_type` moves data between replicas (set-up ops do not)."""
    return op_type.startswith(COLLECTIVE_OP_PREFIXES) and op_type not in SETUP_OP_TYPES


def is_setup_op(op_type: str) -> bool:
    """Whether `op_type` is a collective set-up op (group assignment, communicator)."""
    return op_type in SETUP_OP_TYPES


def graph_op_types(traced: Traced) -> list[str]:
    """The op types of a graph and of every function in its library, one entry per op.

    Args:
        traced: A `tf.Graph` or a concrete function (`tf.function(...).get_concrete_function(...)`).

    Returns:
        The type of every op of the graph, then of every op of each function the
        graph defines (nested `tf.function`s, loop and branch bodies, gradients).
    """
    graph = traced if isinstance(traced, tf.Graph) else traced.graph
    graph_def = graph.as_graph_def()
    op_types = [node.op for node in graph_def.node]
    for function in graph_def.library.function:
        op_types.extend(node.op for node in function.node_def)
    return op_types


def count_collectives(traced: Traced) -> int:
    """Counts the data-moving collective ops of a traced graph, nested functions included.

    Args:
        traced: A `tf.Graph` or a concrete function.

    Returns:
        The number of ops for which `is_collective` holds. Under
        `MirroredStrategy` each replica's exchange is its own op, so a step in
        which every replica all-reduces once holds one op per replica.
    """
    return sum(1 for op_type in graph_op_types(traced) if is_collective(op_type))
