"""Deprecated: import these from `tensorflow_similarity.testing`, where they are documented.

A thin re-export kept while test files still import it; new tests import
`tensorflow_similarity.testing` directly (`mirrored_strategy(k)`,
`run_on_replicas`, `run_local_workers`, ...).
"""

from __future__ import annotations

from tensorflow_similarity.testing import (
    assert_layer_parity,
    mirrored_strategy,
    run_local_workers,
    run_on_replicas,
)

__all__ = ["assert_layer_parity", "mirrored_strategy", "run_local_workers", "run_on_replicas"]
