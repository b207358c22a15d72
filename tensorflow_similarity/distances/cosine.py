"""Cosine distance."""

from __future__ import annotations

import keras
import tensorflow as tf

from tensorflow_similarity.distances.distance import Distance
from tensorflow_similarity.l2_normalize import l2_normalize


@keras.saving.register_keras_serializable(package="Similarity")
class CosineDistance(Distance):
    """Pairwise cosine distance `1 - cos(q, k)`, in `[0, 2]`.

    Rows are L2-normalised first, so the value is the cosine distance for any
    input; on unit rows, what `MetricEmbedding` outputs, it equals 0.17's
    `1 - q.k`, which assumed unit rows without checking. Rounding below zero
    is clipped to zero. A zero row has distance 1 to everything.

    Args:
        name: Canonical name. Defaults to `"cosine"`.
        aliases: Other accepted names. Defaults to none.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.distances import CosineDistance
    >>> CosineDistance()(np.array([[1.0, 0.0]]), np.array([[0.0, 2.0], [3.0, 0.0]])).numpy()
    array([[1., 0.]])
    """

    default_name = "cosine"

    def call(self, query_embeddings: tf.Tensor, key_embeddings: tf.Tensor) -> tf.Tensor:
        query_embeddings = l2_normalize(query_embeddings, axis=1)
        key_embeddings = l2_normalize(key_embeddings, axis=1)
        return tf.maximum(1.0 - tf.matmul(query_embeddings, key_embeddings, transpose_b=True), 0.0)
