"""0.17's `random_solarize`."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tensorflow_similarity.augmenters.augmentation_utils.random_apply import random_apply

__all__ = ["random_solarize"]


def random_solarize(
    image: Any,
    p: float = 0.2,
    pixel_min: int = 0,
    pixel_max: int = 255,
    thresh: int = 10,
    *,
    seed: Any = None,
) -> tf.Tensor:
    """With probability `p`, inverts the values at or above `thresh`.

    A value `v >= thresh` becomes `pixel_max + pixel_min - v` (0.17:
    `pixel_max - v`, the same for the default `pixel_min=0`; 0.17 ignored
    `pixel_min`). The defaults are for `[0, 255]` images; for `[0, 1]`
    images pass `pixel_max=1, thresh=0.5` (0.17's `BarlowAugmenter` kept
    `thresh=10` there, so it never solarised). One draw for all of `image`.

    Args:
        image: Images of any shape.
        p: Probability of solarising. Defaults to 0.2.
        pixel_min: The smallest pixel value. Defaults to 0.
        pixel_max: The largest pixel value. Defaults to 255.
        thresh: Values at or above it are inverted. Defaults to 10.
        seed: See `random_apply`.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters.augmentation_utils.solarize import random_solarize
    >>> random_solarize(tf.constant([5.0, 200.0]), p=1.0).numpy().tolist()
    [5.0, 55.0]
    """
    image = tf.convert_to_tensor(image)

    def solarize(x: tf.Tensor) -> tf.Tensor:
        inverted = tf.cast(pixel_max + pixel_min, x.dtype) - x
        return tf.where(x < tf.cast(thresh, x.dtype), x, inverted)

    return random_apply(solarize, p, image, seed=seed)
