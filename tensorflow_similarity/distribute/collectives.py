"""Re-exports `tensorflow_similarity.collectives` (its old path, below `layers` since)."""

from __future__ import annotations

from tensorflow_similarity.collectives import (
    check_group_size,
    check_group_size_argument,
    gather_global_batch,
    gather_rows,
    global_sum,
    group_sum,
    scale_for_replicas,
    sum_by_group,
    sync_replica_context,
)

__all__ = [
    "check_group_size",
    "check_group_size_argument",
    "gather_global_batch",
    "gather_rows",
    "global_sum",
    "group_sum",
    "scale_for_replicas",
    "sum_by_group",
    "sync_replica_context",
]
