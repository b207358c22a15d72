"""Euclidean (L2) distance."""

from __future__ import annotations

import keras
import tensorflow as tf

from tensorflow_similarity.distances.distance import Distance, squared_euclidean

# Below this squared distance the value is 0 and its gradient is cut: sqrt's
# derivative 1 / (2 sqrt(x)) is infinite at 0, and 0 * inf is NaN.
_SQRT_FLOOR = 1e-18


@keras.saving.register_keras_serializable(package="Similarity")
class EuclideanDistance(Distance):
    """Pairwise Euclidean distance `|q - k|_2`.

    Its gradient is finite everywhere: where the squared distance (computed
    as `|q|^2 - 2 q.k + |k|^2`, clipped at 0) is below `1e-18`, identical rows
    included, the value is 0 with a zero gradient, where a plain `sqrt` would
    give NaN. A NaN input gives NaN distances (never 0), so that a loss over
    them is NaN rather than finite with NaN gradients.

    Args:
        name: Canonical name. Defaults to `"euclidean"`.
        aliases: Other accepted names. Defaults to `["l2", "pythagorean"]`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.distances import EuclideanDistance
    >>> EuclideanDistance()(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]])).numpy()
    array([[5.]])
    """

    default_name = "euclidean"
    default_aliases = ("l2", "pythagorean")

    def call(self, query_embeddings: tf.Tensor, key_embeddings: tf.Tensor) -> tf.Tensor:
        squared = squared_euclidean(query_embeddings, key_embeddings)
        # Written as "not <=" so that a NaN squared distance counts as positive and
        # reaches the result (and the loss) as NaN, where "> floor" would zero it.
        positive = tf.logical_not(squared <= _SQRT_FLOOR)
        # The inner where keeps sqrt away from 0 so that its gradient is finite
        # in the branch the outer where discards.
        safe = tf.where(positive, squared, tf.ones_like(squared))
        return tf.where(positive, tf.sqrt(safe), tf.zeros_like(squared))
