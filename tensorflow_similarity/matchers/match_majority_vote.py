"""Matching by majority vote of the neighbours."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.matchers.classification_match import ClassificationMatch


@keras.saving.register_keras_serializable(package="Similarity")
class MatchMajorityVote(ClassificationMatch):
    """The derived label is the most common among the `K` neighbours; the distance their mean.

    A tie goes to the tied label that appears first, that is nearest (as
    0.17's `tf.unique_with_counts` + `argmax` did). The distance is the mean
    distance of all `K` neighbours, as in 0.17. A neighbour at an infinite
    distance is missing (a query for which an approximate search found
    fewer than `K` is padded so; see `unpack_lookup_labels`): it has no
    vote and no part in the mean. A query with no neighbour at all keeps
    the padding label, at distance `inf`, so it matches at no threshold.

    Args:
        name: Defaults to `"majority_vote"`.
        canonical_name: Defaults to `"match_majority_vote"`.

    Example:

    >>> from tensorflow_similarity.matchers import MatchMajorityVote
    >>> labels, distances = MatchMajorityVote().match([[3, 1, 1]], [[0.1, 0.2, 0.6]])
    >>> labels.tolist(), distances.round(6).tolist()
    ([[1]], [[0.3]])
    """

    default_name = "majority_vote"
    default_canonical_name = "match_majority_vote"

    def derive_match(
        self, lookup_labels: np.ndarray, lookup_distances: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # Arrays or tensors (0.17 called it with tensors); `match` passes checked arrays.
        lookup_labels, lookup_distances = np.asarray(lookup_labels), np.asarray(lookup_distances)
        found = np.isfinite(lookup_distances)
        # votes[i, j]: how many of row i's found neighbours share neighbour j's label.
        same = lookup_labels[:, :, np.newaxis] == lookup_labels[:, np.newaxis, :]
        votes = np.where(found, (same & found[:, np.newaxis, :]).sum(axis=2), -1)
        winners = np.argmax(votes, axis=1)  # first maximum: the nearest of the tied labels
        labels = np.take_along_axis(lookup_labels, winners[:, np.newaxis], axis=1)
        count = found.sum(axis=1, keepdims=True)
        total = np.where(found, lookup_distances, 0).sum(axis=1, keepdims=True)
        mean = np.where(count > 0, total / np.maximum(count, 1).astype(total.dtype), np.inf)
        return labels, mean.astype(lookup_distances.dtype)
