"""Shared inputs of the metric-loss tests."""

from __future__ import annotations

import numpy as np

# Class 3 is a singleton: its anchor has no positive.
LABELS = np.array([0, 1, 2, 0, 1, 2, 0, 1, 3, 2])


def embeddings(seed: int = 0, n: int = len(LABELS), dim: int = 4) -> np.ndarray:
    """Returns `[n, dim]` float64 embeddings of unit rows, classes loosely clustered."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(10, dim))
    labels = LABELS if n == len(LABELS) else rng.integers(0, 3, size=n)
    x = centres[labels % 10] + 0.9 * rng.normal(size=(n, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True)
