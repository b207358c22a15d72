"""A dense projection whose outputs lie on the unit sphere."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

# As tf.math.l2_normalize: a zero row stays zero instead of becoming NaN.
_MIN_SQUARED_NORM = 1e-12
# The gradient through a row of norm r above the floor is the incoming one times up to 1 / r:
# 1e6 at the floor above, past float16's largest value (65504) for any incoming gradient above
# 0.07, and an infinite gradient turns every weight below it into NaN. In float16 the floor is
# 1e-6 (a norm of 1e-3, below float16's resolution of a unit vector's components).
_MIN_SQUARED_NORM_FLOAT16 = 1e-6


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
        z = super().call(inputs, training=training)
        if self.compute_dtype in ("float16", "bfloat16"):
            z = ops.cast(z, "float32")
        floor = _MIN_SQUARED_NORM_FLOAT16 if self.compute_dtype == "float16" else _MIN_SQUARED_NORM
        squared_norm = ops.sum(ops.square(z), axis=-1, keepdims=True)
        normalised = z * ops.rsqrt(ops.maximum(squared_norm, floor))
        # The direction of a row below the floor is undefined: it gets no gradient (as a ReLU
        # at zero), rather than the incoming one times 1 / sqrt(floor). `where` selects, so an
        # infinite incoming gradient (a float32 loss's gradient cast to float16) stays out too.
        z = ops.where(squared_norm < floor, ops.stop_gradient(normalised), normalised)
        return ops.cast(z, self.compute_dtype)
