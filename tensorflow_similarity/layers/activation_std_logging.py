"""A pass-through layer that logs the spread of its inputs, a collapse monitor."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="Similarity")
class ActivationStdLoggingLayer(keras.layers.Layer):
    """Returns its inputs unchanged and tracks their mean per-dimension spread.

    Each call L2-normalises the rows of its `[batch, features]` inputs, takes
    the standard deviation of every feature over the batch and adds the mean
    over features to a `keras.metrics.Mean` named after the layer, so `fit`
    and `evaluate` report its average over the epoch. A healthy
    representation of `D` features sits near `1 / sqrt(D)`; a collapsed one
    falls to 0 (the SimSiam paper's monitor).

    Args:
        name: The layer's name, also the metric's (e.g. `"proj_std"`).
        **kwargs: Base layer keyword arguments (`dtype`, ...).

    Example:

    >>> import keras
    >>> from tensorflow_similarity.layers import ActivationStdLoggingLayer
    >>> inputs = keras.Input((8,))
    >>> outputs = ActivationStdLoggingLayer(name="proj_std")(keras.layers.Dense(8)(inputs))
    >>> model = keras.Model(inputs, outputs)
    """

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name=name, **kwargs)
        self.std_tracker = keras.metrics.Mean(name=name)

    def call(self, inputs):
        normalised = ops.normalize(ops.cast(inputs, "float32"), axis=-1, order=2)
        self.std_tracker.update_state(ops.mean(ops.std(normalised, axis=0)))
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape
