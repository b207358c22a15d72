"""Squared Euclidean distance."""

from __future__ import annotations

import keras
import tensorflow as tf

from tensorflow_similarity.distances.distance import Distance, squared_euclidean


@keras.saving.register_keras_serializable(package="Similarity")
class SquaredEuclideanDistance(Distance):
    """Pairwise squared Euclidean distance `|q - k|_2^2`, in `[0, inf)`.

    Args:
        name: Canonical name. Defaults to `"squared_euclidean"`.
        aliases: Other accepted names. Defaults to `["sql2", "sqeuclidean"]`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.distances import SquaredEuclideanDistance
    >>> SquaredEuclideanDistance()(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]])).numpy()
    array([[25.]])
    """

    default_name = "squared_euclidean"
    default_aliases = ("sql2", "sqeuclidean")

    def call(self, query_embeddings: tf.Tensor, key_embeddings: tf.Tensor) -> tf.Tensor:
        return squared_euclidean(query_embeddings, key_embeddings)
