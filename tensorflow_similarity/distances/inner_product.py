"""Inner product similarity."""

from __future__ import annotations

import keras
import tensorflow as tf

from tensorflow_similarity.distances.distance import Distance


@keras.saving.register_keras_serializable(package="Similarity")
class InnerProductSimilarity(Distance):
    """Pairwise inner product `q . k`: a similarity, larger for closer rows.

    Not a distance: the mining losses (`TripletLoss`, `PNLoss`, ...) read
    larger values as farther, so with it their margins change sign. It is the
    similarity `MultiNegativesRankLoss` expects.

    Args:
        name: Canonical name. Defaults to `"inner_product"`.
        aliases: Other accepted names. Defaults to `["ip"]`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.distances import InnerProductSimilarity
    >>> InnerProductSimilarity()(np.array([[1.0, 2.0]]), np.array([[3.0, 4.0]])).numpy()
    array([[11.]])
    """

    default_name = "inner_product"
    default_aliases = ("ip",)

    def call(self, query_embeddings: tf.Tensor, key_embeddings: tf.Tensor) -> tf.Tensor:
        return tf.matmul(query_embeddings, key_embeddings, transpose_b=True)
