"""Matching by the nearest neighbour."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.matchers.classification_match import ClassificationMatch


@keras.saving.register_keras_serializable(package="Similarity")
class MatchNearest(ClassificationMatch):
    """The derived label and distance are the nearest neighbour's.

    Args:
        name: Defaults to `"nearest"`.
        canonical_name: Defaults to `"match_nearest"`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.matchers import MatchNearest
    >>> labels, distances = MatchNearest().match([[3, 1], [2, 2]], [[0.1, 0.2], [0.3, 0.4]])
    >>> labels.tolist(), distances.tolist()
    ([[3], [2]], [[0.1], [0.3]])
    """

    default_name = "nearest"
    default_canonical_name = "match_nearest"

    def derive_match(
        self, lookup_labels: np.ndarray, lookup_distances: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # Arrays or tensors (0.17 called it with tensors); `match` passes checked arrays.
        lookup_labels, lookup_distances = np.asarray(lookup_labels), np.asarray(lookup_distances)
        return lookup_labels[:, :1], lookup_distances[:, :1]
