"""Resolves a distance given by name or instance."""

from __future__ import annotations

from tensorflow_similarity.distances.cosine import CosineDistance
from tensorflow_similarity.distances.distance import Distance
from tensorflow_similarity.distances.euclidean import EuclideanDistance
from tensorflow_similarity.distances.inner_product import InnerProductSimilarity
from tensorflow_similarity.distances.manhattan import ManhattanDistance
from tensorflow_similarity.distances.snr import SNRDistance
from tensorflow_similarity.distances.squared_euclidean import SquaredEuclideanDistance

DISTANCE_CLASSES: tuple[type[Distance], ...] = (
    CosineDistance,
    EuclideanDistance,
    SquaredEuclideanDistance,
    ManhattanDistance,
    InnerProductSimilarity,
    SNRDistance,
)


def _names() -> dict[str, type[Distance]]:
    names = {}
    for cls in DISTANCE_CLASSES:
        for name in (cls.default_name, *cls.default_aliases, cls.__name__.lower()):
            names[name] = cls
    return names


def distance_canonicalizer(distance: Distance | str) -> Distance:
    """Returns the `Distance` named by `distance`, or `distance` itself.

    Names are case-insensitive and surrounding spaces are ignored. They are
    0.17's: `"cosine"`; `"euclidean"`, `"l2"`, `"pythagorean"`;
    `"squared_euclidean"`, `"sql2"`, `"sqeuclidean"`; `"manhattan"`, `"l1"`,
    `"taxicab"`; `"inner_product"`, `"ip"`; `"snr"`,
    `"signal-to-noise-ratio"`; and each class name in lower case.

    Args:
        distance: A `Distance` instance (returned as is) or a name.

    Returns:
        A `Distance` instance.

    Raises:
        ValueError: If `distance` is neither a `Distance` nor a known name
            (the message lists the names).

    Example:

    >>> from tensorflow_similarity.distances import distance_canonicalizer
    >>> distance_canonicalizer("L2")
    EuclideanDistance(name='euclidean')
    """
    if isinstance(distance, Distance):
        return distance
    names = _names()
    if isinstance(distance, str) and distance.strip().lower() in names:
        return names[distance.strip().lower()]()
    raise ValueError(
        f"Unknown distance {distance!r}. Pass a Distance instance or one of the names "
        f"{sorted(names)}."
    )
