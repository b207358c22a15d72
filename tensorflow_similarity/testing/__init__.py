"""Tooling for testing distributed code on one machine; the package never imports it."""

from tensorflow_similarity.testing.collective_ops import (
    count_collectives,
    graph_op_types,
    is_collective,
    is_setup_op,
)
from tensorflow_similarity.testing.local_cluster import free_ports, run_local_workers
from tensorflow_similarity.testing.parity import (
    Parity,
    assert_replica_parity,
    mirrored_strategy,
    replica_parity,
    uneven_sizes,
)

__all__ = [
    "Parity",
    "assert_replica_parity",
    "count_collectives",
    "free_ports",
    "graph_op_types",
    "is_collective",
    "is_setup_op",
    "mirrored_strategy",
    "replica_parity",
    "run_local_workers",
    "uneven_sizes",
]
