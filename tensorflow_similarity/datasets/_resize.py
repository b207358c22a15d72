"""Resizing images to the squares every loader returns."""

from __future__ import annotations

import numpy as np


def resize_images(images: np.ndarray, image_size: int) -> np.ndarray:
    """`[n, h, w, 3]` images as `[n, image_size, image_size, 3]` float32 in `[0, 1]`.

    Bilinear, antialiased when shrinking; images already of that size are only cast.
    """
    if images.shape[1:3] == (image_size, image_size):
        return images.astype(np.float32)
    import tensorflow as tf

    resized = tf.image.resize(images, (image_size, image_size), antialias=True)
    return np.clip(resized.numpy(), 0.0, 1.0).astype(np.float32)
