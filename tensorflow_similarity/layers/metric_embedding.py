"""A dense projection whose outputs lie on the unit sphere."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity.l2_normalize import l2_normalize


@keras.saving.register_keras_serializable(package="Similarity")
class MetricEmbedding(keras.layers.Dense):
    """A `Dense` layer whose output is L2-normalised along the last axis.

    Computes `z = dense(x)` then `z / sqrt(max(sum(z ** 2), 1e-12))`, the
    embedding used with cosine distance: every output has unit length, so dot
    products are cosine similarities, and a zero row stays zero. The weights
    (`kernel`, `bias`) are those of `keras.layers.Dense`, so weights move
    between the two with `set_weights`. In float16 / bfloat16 the
    normalisation runs in float32; in float16 the floor is `1e-6` instead of
    `1e-12`, so that the gradient through a short row (the incoming one
    divided by the row's norm) stays within float16's range. A row whose
    squared norm is below the floor has no direction and gets no gradient.

    Args:
        units: Size of the embedding, a positive integer.
        **kwargs: Any other `keras.layers.Dense` argument (`use_bias`,
            `kernel_initializer`, `kernel_regularizer`, `name`, ...). An
            `activation`, if given, is applied before the normalisation.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.layers import MetricEmbedding
    >>> layer = MetricEmbedding(128)
    >>> y = layer(np.random.rand(4, 512).astype("float32"))
    >>> np.allclose(np.linalg.norm(y, axis=-1), 1.0, atol=1e-5)
    True
    """

    def __init__(self, units: int, **kwargs: Any) -> None:
        super().__init__(units, **kwargs)

    def call(self, inputs, training=None):
        return l2_normalize(super().call(inputs, training=training))
