"""Pairwise distances between query and key embeddings.

Each distance maps a `[n, d]` query and a `[m, d]` key to the `[n, m]` matrix
of their pairwise values; `distance_canonicalizer` resolves a name (0.17's
names and aliases) to an instance of a distance registered in `DISTANCES`.
"""

from __future__ import annotations

from tensorflow_similarity.distances.canonicalizer import DISTANCES, distance_canonicalizer
from tensorflow_similarity.distances.cosine import CosineDistance
from tensorflow_similarity.distances.distance import Distance
from tensorflow_similarity.distances.euclidean import EuclideanDistance
from tensorflow_similarity.distances.inner_product import InnerProductSimilarity
from tensorflow_similarity.distances.manhattan import ManhattanDistance
from tensorflow_similarity.distances.snr import SNRDistance
from tensorflow_similarity.distances.squared_euclidean import SquaredEuclideanDistance

__all__ = [
    "DISTANCES",
    "CosineDistance",
    "Distance",
    "EuclideanDistance",
    "InnerProductSimilarity",
    "ManhattanDistance",
    "SNRDistance",
    "SquaredEuclideanDistance",
    "distance_canonicalizer",
]
