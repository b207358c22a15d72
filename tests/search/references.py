"""Float64 NumPy loops that the search tests compare against."""

from __future__ import annotations

import numpy as np


def _cosine(q, k):
    norms = np.linalg.norm(q) * np.linalg.norm(k)
    return 1.0 - (q @ k / norms if norms else 0.0)


# Each returns the distance as the searches report it: smaller is nearer, so
# the inner product comes negated.
REFERENCES = {
    "cosine": _cosine,
    "inner_product": lambda q, k: -(q @ k),
    "euclidean": lambda q, k: np.sqrt(np.sum((q - k) ** 2)),
    "squared_euclidean": lambda q, k: np.sum((q - k) ** 2),
    "manhattan": lambda q, k: np.sum(np.abs(q - k)),
    "snr": lambda q, k: np.var(k - q) / np.var(q),
}


def knn_loop(distance: str, queries, keys, ids, k: int):
    """Returns the `[n, k]` ids and distances of the exact neighbours, by loops."""
    reference = REFERENCES[distance]
    queries, keys = np.asarray(queries, np.float64), np.asarray(keys, np.float64)
    all_ids, all_distances = [], []
    for query in queries:
        distances = [reference(query, key) for key in keys]
        order = sorted(range(len(keys)), key=lambda j: distances[j])[:k]
        all_ids.append([ids[j] for j in order])
        all_distances.append([distances[j] for j in order])
    return np.array(all_ids), np.array(all_distances)
