"""Tooling for testing distributed code on one machine; the package never imports it."""

from tensorflow_similarity.testing.collective_ops import (
    count_collectives,
    graph_op_types,
    is_collective,
    is_setup_op,
)
from tensorflow_similarity.testing.config_round_trip import assert_config_round_trip
from tensorflow_similarity.testing.layer_parity import LayerParity, assert_layer_parity
from tensorflow_similarity.testing.local_cluster import free_ports, run_local_workers
from tensorflow_similarity.testing.parity import (
    Parity,
    assert_replica_parity,
    replica_parity,
    uneven_sizes,
)
from tensorflow_similarity.testing.replicas import ReplicaRun, mirrored_strategy, run_on_replicas

__all__ = [
    "LayerParity",
    "Parity",
    "ReplicaRun",
    "assert_config_round_trip",
    "assert_layer_parity",
    "assert_replica_parity",
    "count_collectives",
    "free_ports",
    "graph_op_types",
    "is_collective",
    "is_setup_op",
    "mirrored_strategy",
    "replica_parity",
    "run_local_workers",
    "run_on_replicas",
    "uneven_sizes",
]
