"""Generalised-mean (GeM) global pooling: the shared base and the 2-D layer."""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from tensorflow_similarity._validation import is_real

# Below this |p| the power mean is numerically the geometric mean (its p -> 0 limit).
_GEOMETRIC_P = 1e-6


@keras.saving.register_keras_serializable(package="Similarity")
class GeneralizedMeanPooling(keras.layers.Layer):
    """Base of the GeM poolings: the power mean over a layer's pooled axes.

    For each sample and channel, with `x_i` the `n` values over the pooled
    axes and `m = min_i x_i`, the output is the power mean of the values
    shifted to start at 1, shifted back:

        y = (1/n * sum_i (x_i - m + 1) ** p) ** (1/p) + m - 1

    Shifting makes the pooling defined for signed features (EfficientNet's
    swish, ConvNeXt's unnormalised stages) and keeps the limits exact for
    every input: `p=1` is global average pooling, `p=inf` global max pooling,
    `p=-inf` global min pooling and `p -> 0` the geometric mean of the shifted
    values. Larger `p` weighs the strongest activations more (Radenovic et al.,
    "Fine-tuning CNN Image Retrieval with No Human Annotation", 2018). This is
    the formula of the original tensorflow-similarity layer; it differs from
    the paper's `clamp(x, eps) ** p` variant, which discards negative values.

    The mean is computed in log space (a log-sum-exp), so large `p` cannot
    overflow, and in float32 when the layer runs in float16 or bfloat16.

    Subclasses set `pooled_rank`, the number of axes between the batch and
    channel axes that they pool: `GeneralizedMeanPooling1D` (steps) and
    `GeneralizedMeanPooling2D` (height and width).

    Args:
        p: The power, a real number or `math.inf` / `-math.inf`. Defaults to
            `3.0`.
        data_format: `"channels_last"` (channels on the last axis) or
            `"channels_first"` (channels right after the batch axis).
            Defaults to `keras.config.image_data_format()`.
        keepdims: Whether to keep the pooled axes with length 1. Defaults to
            `False`.
        **kwargs: Base layer keyword arguments (`name`, `dtype`, ...).

    Raises:
        ValueError: If `p` is not a real number (or is NaN), or `data_format`
            is not one of the two formats.
        TypeError: When the base class itself is instantiated.
    """

    pooled_rank: int | None = None

    def __init__(
        self,
        p: float = 3.0,
        data_format: str | None = None,
        keepdims: bool = False,
        **kwargs: Any,
    ) -> None:
        name = type(self).__name__
        if self.pooled_rank is None:
            raise TypeError(
                "GeneralizedMeanPooling is the base class of the GeM poolings; use "
                "GeneralizedMeanPooling1D (sequences) or GeneralizedMeanPooling2D (images)."
            )
        if not is_real(p) or math.isnan(p):
            raise ValueError(
                f"{name} needs p to be a real number (1.0 is average "
                f"pooling, math.inf max pooling). Received: p={p!r}"
            )
        data_format = data_format or keras.config.image_data_format()
        if data_format not in ("channels_last", "channels_first"):
            raise ValueError(
                'data_format must be "channels_last" or "channels_first". '
                f"Received: data_format={data_format!r}"
            )
        super().__init__(**kwargs)
        self.p = float(p)
        self.data_format = data_format
        self.keepdims = bool(keepdims)
        self.input_spec = keras.layers.InputSpec(ndim=self.pooled_rank + 2)

    def _pooled_axes(self) -> tuple[int, ...]:
        first = 1 if self.data_format == "channels_last" else 2
        return tuple(range(first, first + self.pooled_rank))

    def call(self, inputs):
        axes = self._pooled_axes()
        x = inputs
        if self.compute_dtype in ("float16", "bfloat16"):
            x = ops.cast(x, "float32")
        if self.p == math.inf:
            y = ops.max(x, axis=axes, keepdims=True)
        elif self.p == -math.inf:
            y = ops.min(x, axis=axes, keepdims=True)
        else:
            low = ops.min(x, axis=axes, keepdims=True)
            log_shifted = ops.log(x - low + 1.0)
            if abs(self.p) < _GEOMETRIC_P:
                log_mean = ops.mean(log_shifted, axis=axes, keepdims=True)
            else:
                shape = ops.shape(x)
                count = 1
                for axis in axes:
                    count = count * shape[axis]
                log_n = ops.log(ops.cast(count, x.dtype))
                log_mean = (
                    ops.logsumexp(self.p * log_shifted, axis=axes, keepdims=True) - log_n
                ) / self.p
            y = ops.exp(log_mean) + low - 1.0
        if not self.keepdims:
            y = ops.squeeze(y, axis=axes)
        return ops.cast(y, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        axes = self._pooled_axes()
        if self.keepdims:
            return tuple(1 if i in axes else d for i, d in enumerate(input_shape))
        return tuple(d for i, d in enumerate(input_shape) if i not in axes)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update({"p": self.p, "data_format": self.data_format, "keepdims": self.keepdims})
        return config


@keras.saving.register_keras_serializable(package="Similarity")
class GeneralizedMeanPooling2D(GeneralizedMeanPooling):
    """Global generalised-mean pooling over height and width, between average and max.

    The formula, its limits and its numerics are `GeneralizedMeanPooling`'s,
    over the `n = H * W` spatial values of each channel.

    Args:
        p: The power, a real number or `math.inf` / `-math.inf`. Defaults to
            `3.0`.
        data_format: `"channels_last"` (`(batch, H, W, C)`) or
            `"channels_first"` (`(batch, C, H, W)`). Defaults to
            `keras.config.image_data_format()`.
        keepdims: Whether to keep the spatial axes with length 1. Defaults to
            `False`.
        **kwargs: Base layer keyword arguments (`name`, `dtype`, ...).

    Raises:
        ValueError: If `p` is not a real number (or is NaN), or `data_format`
            is not one of the two formats.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.layers import GeneralizedMeanPooling2D
    >>> pool = GeneralizedMeanPooling2D(p=3.0)
    >>> tuple(pool(np.ones((2, 7, 7, 512), "float32")).shape)
    (2, 512)
    """

    pooled_rank = 2
