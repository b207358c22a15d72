"""Signal-to-noise ratio distance."""

from __future__ import annotations

import keras
import tensorflow as tf

from tensorflow_similarity.distances.distance import Distance


@keras.saving.register_keras_serializable(package="Similarity")
class SNRDistance(Distance):
    """Pairwise signal-to-noise ratio distance `var(k - q) / var(q)`.

    From Yuan et al., "Signal-to-Noise Ratio: A Robust Distance Metric for
    Deep Metric Learning", CVPR 2019 (https://arxiv.org/abs/1904.02616): the
    variance over features of the difference (the noise) divided by the
    variance of the query row (the signal). It is not symmetric. A query row
    whose features are all equal has zero variance and gives an infinite (or
    NaN) distance.

    Args:
        name: Canonical name. Defaults to `"snr"`.
        aliases: Other accepted names. Defaults to `["signal-to-noise-ratio"]`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.distances import SNRDistance
    >>> SNRDistance()(np.array([[1.0, -1.0]]), np.array([[2.0, -2.0]])).numpy()
    array([[1.]])
    """

    default_name = "snr"
    default_aliases = ("signal-to-noise-ratio",)

    def call(self, query_embeddings: tf.Tensor, key_embeddings: tf.Tensor) -> tf.Tensor:
        noise = tf.math.reduce_variance(
            key_embeddings[tf.newaxis, :, :] - query_embeddings[:, tf.newaxis, :], axis=2
        )
        return noise / tf.math.reduce_variance(query_embeddings, axis=1, keepdims=True)
