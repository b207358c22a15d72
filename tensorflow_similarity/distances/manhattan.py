"""Manhattan (L1) distance."""

from __future__ import annotations

import keras
import tensorflow as tf

from tensorflow_similarity.distances.distance import Distance


@keras.saving.register_keras_serializable(package="Similarity")
class ManhattanDistance(Distance):
    """Pairwise Manhattan distance `sum_d |q_d - k_d|`.

    It materialises the `[n, m, d]` differences, so memory grows with all
    three sizes. The gradient of `|x|` at 0 is taken as 0.

    Args:
        name: Canonical name. Defaults to `"manhattan"`.
        aliases: Other accepted names. Defaults to `["l1", "taxicab"]`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.distances import ManhattanDistance
    >>> ManhattanDistance()(np.array([[0.0, 0.0]]), np.array([[3.0, -4.0]])).numpy()
    array([[7.]])
    """

    default_name = "manhattan"
    default_aliases = ("l1", "taxicab")

    def call(self, query_embeddings: tf.Tensor, key_embeddings: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(
            tf.abs(query_embeddings[:, tf.newaxis, :] - key_embeddings[tf.newaxis, :, :]), axis=2
        )
