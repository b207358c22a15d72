"""Re-exports `tensorflow_similarity.layer_walk` (its old path, below `layers` since)."""

from __future__ import annotations

from tensorflow_similarity.layer_walk import (
    LayerPath,
    all_layers,
    find_layers,
    is_graph_model,
    walk_layers,
)

__all__ = ["LayerPath", "all_layers", "find_layers", "is_graph_model", "walk_layers"]
