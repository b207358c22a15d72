"""The collective counter on hand-made graphs whose collectives are known by construction."""

from __future__ import annotations

import tensorflow as tf

from tensorflow_similarity.testing import (
    count_collectives,
    graph_op_types,
    is_collective,
    is_setup_op,
    mirrored_strategy,
)


def _all_reduce(x, instance_key):
    return tf.raw_ops.CollectiveReduceV2(
        input=x,
        group_size=tf.constant(2),
        group_key=tf.constant(1),
        instance_key=tf.constant(instance_key),
        ordering_token=[],
        merge_op="Add",
        final_op="Id",
    )


def _setup_op():
    return tf.raw_ops.CollectiveAssignGroupV2(
        group_assignment=tf.constant([[0, 1]]), device_index=tf.constant(0), base_key=tf.constant(7)
    )


def _hand_made_graph():
    """Three all-reduces and a set-up op at top level, one gather in a nested function."""

    @tf.function
    def nested(x):
        return tf.raw_ops.CollectiveGatherV2(
            input=x,
            group_size=tf.constant(2),
            group_key=tf.constant(1),
            instance_key=tf.constant(9),
            ordering_token=[],
        )

    graph = tf.Graph()
    with graph.as_default():
        x = tf.ones((3,))
        for key in range(3):
            x = _all_reduce(x, key)
        _setup_op()
        nested(x)
    return graph


def test_counts_data_collectives_of_the_graph_and_its_functions():
    graph = _hand_made_graph()
    op_types = graph_op_types(graph)
    assert op_types.count("CollectiveReduceV2") == 3
    assert op_types.count("CollectiveGatherV2") == 1
    assert "CollectiveAssignGroupV2" in op_types
    assert count_collectives(graph) == 4


def test_counts_a_concrete_function_like_its_graph():
    @tf.function
    def step(x):
        _setup_op()
        return _all_reduce(_all_reduce(x, 0), 1)

    concrete = step.get_concrete_function(tf.TensorSpec((3,)))
    assert count_collectives(concrete) == count_collectives(concrete.graph) == 2


def test_set_up_ops_are_not_collectives():
    for op_type in ("CollectiveAssignGroupV2", "CollectiveInitializeCommunicator"):
        assert is_setup_op(op_type) and not is_collective(op_type)
    for op_type in ("CollectiveReduceV2", "CollectiveGatherV2", "NcclAllReduce"):
        assert is_collective(op_type) and not is_setup_op(op_type)
    for op_type in ("AddV2", "Identity", "MatMul"):
        assert not is_collective(op_type) and not is_setup_op(op_type)


def test_one_all_reduce_per_replica_under_mirrored_strategy():
    # Guards the op names against a TensorFlow release that renames them.
    strategy = mirrored_strategy(2)

    def replica_fn():
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.ones((3,)))

    step = tf.function(lambda: strategy.run(replica_fn))
    assert count_collectives(step.get_concrete_function()) == 2
