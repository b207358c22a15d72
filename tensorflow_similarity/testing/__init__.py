"""Tooling for testing distributed code on one machine; the package never imports it."""

from tensorflow_similarity.testing.collective_ops import (
    count_collectives,
    graph_op_types,
    is_collective,
    is_setup_op,
)
from tensorflow_similarity.testing.local_cluster import free_ports, run_local_workers

__all__ = [
    "count_collectives",
    "free_ports",
    "graph_op_types",
    "is_collective",
    "is_setup_op",
    "run_local_workers",
]
