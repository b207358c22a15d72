"""Resolves a distance given by name or instance."""

from __future__ import annotations

import copy

from tensorflow_similarity.distances.cosine import CosineDistance
from tensorflow_similarity.distances.distance import Distance
from tensorflow_similarity.distances.euclidean import EuclideanDistance
from tensorflow_similarity.distances.inner_product import InnerProductSimilarity
from tensorflow_similarity.distances.manhattan import ManhattanDistance
from tensorflow_similarity.distances.snr import SNRDistance
from tensorflow_similarity.distances.squared_euclidean import SquaredEuclideanDistance

# In 0.17's order.
DISTANCE_CLASSES: tuple[type[Distance], ...] = (
    InnerProductSimilarity,
    EuclideanDistance,
    SquaredEuclideanDistance,
    ManhattanDistance,
    CosineDistance,
    SNRDistance,
)

# 0.17's registry of named distances, one instance per class of `DISTANCE_CLASSES`.
# `distance_canonicalizer` reads it on each call, so a `Distance` appended here
# is found by its name and aliases, as in 0.17.
DISTANCES: list[Distance] = [cls() for cls in DISTANCE_CLASSES]


def _names() -> dict[str, Distance]:
    names = {}
    for distance in DISTANCES:
        for name in (distance.name, *distance.aliases, type(distance).__name__):
            names[name.strip().lower()] = distance
    return names


def distance_canonicalizer(user_distance: Distance | str) -> Distance:
    """Returns the `Distance` named by `distance`, or `distance` itself.

    Names are case-insensitive and surrounding spaces are ignored. They are
    0.17's: `"cosine"`; `"euclidean"`, `"l2"`, `"pythagorean"`;
    `"squared_euclidean"`, `"sql2"`, `"sqeuclidean"`; `"manhattan"`, `"l1"`,
    `"taxicab"`; `"inner_product"`, `"ip"`; `"snr"`,
    `"signal-to-noise-ratio"`; and each class name in lower case: the names
    and aliases of the distances in `DISTANCES`, which a user may extend.

    Args:
        user_distance: A `Distance` instance (returned as is) or a name
            (0.17's argument name).

    Returns:
        A `Distance` instance; for a name, a copy of the registered one, so
        that changing it leaves `DISTANCES` as it was.

    Raises:
        ValueError: If `distance` is neither a `Distance` nor a known name
            (the message lists the names).

    Example:

    >>> from tensorflow_similarity.distances import distance_canonicalizer
    >>> distance_canonicalizer("L2")
    EuclideanDistance(name='euclidean')
    """
    if isinstance(user_distance, Distance):
        return user_distance
    names = _names()
    if isinstance(user_distance, str) and user_distance.strip().lower() in names:
        registered = names[user_distance.strip().lower()]
        return copy.deepcopy(registered)
    raise ValueError(
        f"Unknown distance {user_distance!r}. Pass a Distance instance or one of the names "
        f"{sorted(names)}."
    )
