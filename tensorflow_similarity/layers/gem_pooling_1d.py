"""Generalised-mean (GeM) global pooling over the steps of a sequence."""

from __future__ import annotations

import keras

from tensorflow_similarity.layers.gem_pooling import GeneralizedMeanPooling


@keras.saving.register_keras_serializable(package="Similarity")
class GeneralizedMeanPooling1D(GeneralizedMeanPooling):
    """Global generalised-mean pooling over the steps of a sequence.

    The formula, its limits and its numerics are `GeneralizedMeanPooling`'s,
    over the `n` steps of each channel: `p=1` is
    `GlobalAveragePooling1D`, `p=inf` `GlobalMaxPooling1D`.

    Args:
        p: The power, a real number or `math.inf` / `-math.inf`. Defaults to
            `3.0`.
        data_format: `"channels_last"` (`(batch, steps, features)`) or
            `"channels_first"` (`(batch, features, steps)`). Defaults to
            `keras.config.image_data_format()`.
        keepdims: Whether to keep the steps axis with length 1. Defaults to
            `False`.
        **kwargs: Base layer keyword arguments (`name`, `dtype`, ...).

    Raises:
        ValueError: If `p` is not a real number (or is NaN), or `data_format`
            is not one of the two formats.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.layers import GeneralizedMeanPooling1D
    >>> pool = GeneralizedMeanPooling1D(p=3.0)
    >>> tuple(pool(np.ones((2, 10, 16), "float32")).shape)
    (2, 16)
    """

    pooled_rank = 1
