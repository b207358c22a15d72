"""0.17's Gaussian blurs: `random_blur`, `batch_random_blur` and `gaussian_blur`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tensorflow_similarity.augmenters import image_ops
from tensorflow_similarity.augmenters.augmentation_utils._seeds import (
    as_batch,
    restore,
    stateless_seed,
    sub_seed,
)
from tensorflow_similarity.augmenters.augmentation_utils.random_apply import random_apply

__all__ = ["batch_random_blur", "gaussian_blur", "random_blur"]


def _kernel_size(height: int, divider: float) -> int:
    # 0.17: a kernel of `height // divider`, made odd as 2 * (size // 2) + 1.
    return 2 * int(int(height // divider) / 2) + 1


def random_blur(
    image: Any,
    height: int,
    width: int,
    p: float = 1.0,
    min_sigma: float = 0.1,
    max_sigma: float = 2.0,
    kernel_size_divider: float = 10,
    *,
    seed: Any = None,
) -> tf.Tensor:
    """With probability `p`, blurs the image(s) with a Gaussian of random width.

    The kernel side is `height // kernel_size_divider` made odd (as 0.17),
    the standard deviation uniform in `[min_sigma, max_sigma]` pixels. On
    `image_ops.random_gaussian_blur`, so unlike 0.17 the borders are
    reflect-padded (0.17 padded with zeros, darkening a band of the
    kernel's radius at the edges) and each image of a batch draws its own
    width (0.17: one for the batch). The `p` draw is shared by a batch.

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`, static `h, w`.
        height: The images' height (sets the kernel size).
        width: Unused, as in 0.17.
        p: Probability of blurring. Defaults to 1.0.
        min_sigma: Smallest standard deviation. Defaults to 0.1.
        max_sigma: Largest standard deviation. Defaults to 2.0.
        kernel_size_divider: Kernel side as a fraction `1 / divider` of
            `height`. Defaults to 10.
        seed: See `random_apply.random_apply`.

    Returns:
        Float32 images of the input's shape.
    """
    del width
    seed = stateless_seed(seed)
    images, single = as_batch(image)
    size = _kernel_size(height, kernel_size_divider)

    def blur(images: tf.Tensor) -> tf.Tensor:
        return image_ops.random_gaussian_blur(
            images, (min_sigma, max_sigma), 1.0, sub_seed(seed, 1), kernel_size=(size, size)
        )

    return restore(random_apply(blur, p, images, seed=sub_seed(seed, 0)), single)


def batch_random_blur(
    images_list: Sequence[Any],
    height: int,
    width: int,
    blur_probability: float = 0.5,
    *,
    seed: Any = None,
) -> list[tf.Tensor]:
    """Blurs each image of each batch with probability `blur_probability`, clipped to `[0, 1]`.

    The kernel is `random_blur`'s (`height // 10`), the standard deviation
    uniform in `[0.1, 2.0]`, drawn per image (0.17: per batch), reflect
    padding (0.17: zeros).

    Args:
        images_list: Batches `[b, h, w, c]` of `[0, 1]` images (or single
            `[h, w, c]` images, each returned in its own shape, as in 0.17).
        height: The images' height.
        width: Unused, as in 0.17.
        blur_probability: Probability of blurring an image. Defaults to 0.5.
        seed: See `random_apply.random_apply`.

    Returns:
        The blurred batches (or images), in order.
    """
    del width
    seed = stateless_seed(seed)
    size = _kernel_size(height, 10)
    blurred = []
    for index, images in enumerate(images_list):
        batch, single = as_batch(images)
        batch = image_ops.random_gaussian_blur(
            batch, (0.1, 2.0), blur_probability, sub_seed(seed, index), kernel_size=(size, size)
        )
        blurred.append(restore(tf.clip_by_value(batch, 0.0, 1.0), single))
    return blurred


def gaussian_blur(image: Any, kernel_size: Any, sigma: float, padding: str = "SAME") -> tf.Tensor:
    """Blurs the image(s) with a separable Gaussian of standard deviation `sigma`.

    As 0.17: the kernel side is `kernel_size` made odd (`2 * (k // 2) + 1`),
    and `padding` is the convolution's: `"SAME"` pads with zeros (keeping the
    size), `"VALID"` shrinks each side by the kernel's radius.

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`.
        kernel_size: The kernel side (an int or an int tensor).
        sigma: The standard deviation in pixels.
        padding: `"SAME"` (default) or `"VALID"`.

    Returns:
        The blurred float32 image(s).

    Example:

    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters.augmentation_utils.blur import gaussian_blur
    >>> image = np.zeros((5, 5, 1), np.float32)
    >>> image[2, 2] = 1.0
    >>> round(float(gaussian_blur(image, 3, sigma=100.0).numpy().sum()), 4)
    1.0
    """
    images, single = as_batch(image)
    radius = tf.cast(tf.cast(kernel_size, tf.float32) / 2, tf.int32)
    offsets = tf.cast(tf.range(-radius, radius + 1), tf.float32)
    weights = tf.exp(-tf.square(offsets) / (2.0 * tf.square(tf.cast(sigma, tf.float32))))
    weights /= tf.reduce_sum(weights)
    channels = tf.shape(images)[-1]
    horizontal = tf.tile(tf.reshape(weights, [1, -1, 1, 1]), [1, 1, channels, 1])
    vertical = tf.tile(tf.reshape(weights, [-1, 1, 1, 1]), [1, 1, channels, 1])
    blurred = tf.nn.depthwise_conv2d(images, horizontal, [1, 1, 1, 1], padding)
    blurred = tf.nn.depthwise_conv2d(blurred, vertical, [1, 1, 1, 1], padding)
    return restore(blurred, single)
