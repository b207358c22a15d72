"""What the view augmenters share: argument checks, the per-call seed and the images' checks.

`ViewAugmenter` (and so `GlyphAugmenter`) and `MultiCropAugmenter` take the
same photometric arguments, seed their calls the same way and accept the same
images; each check here names its `owner`, so errors say which augmenter
refused what.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tensorflow_similarity._validation import check_int, check_number, check_pair, is_int, is_real

MAX_SEED = 2**63


def check_probability(name: str, value: Any, owner: str) -> float:
    """`value` as a float in `[0, 1]`."""
    return check_number(name, value, low=0.0, high=1.0, owner=owner)


def check_probability_pair(name: str, value: Any, owner: str, pair: str) -> tuple[float, float]:
    """One probability for both views, or a pair of them; `pair` describes the pair in errors."""
    if is_real(value):
        probability = check_probability(name, value, owner)
        return probability, probability
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(
            f"{owner}: {name} must be a probability or a pair {pair}. Received: {name}={value!r}"
        )
    return check_probability(name, value[0], owner), check_probability(name, value[1], owner)


def check_size(name: str, value: Any, owner: str) -> tuple[int, int]:
    """A positive integer or `(height, width)` pair of them, as `(height, width)`."""
    pair = (value, value) if is_int(value) else value
    if (
        isinstance(pair, (str, bytes))
        or not isinstance(pair, Sequence)
        or len(pair) != 2
        or not all(is_int(v) and v > 0 for v in pair)
    ):
        raise ValueError(
            f"{owner}: {name} must be a positive integer or a pair (height, width) of "
            f"positive integers. Received: {name}={value!r}"
        )
    return int(pair[0]), int(pair[1])


def check_crop_ratio(value: Any, owner: str) -> tuple[float, float]:
    """`(min, max)` aspect ratio of a crop, with a positive minimum."""
    ratio = check_pair("crop_ratio", value, low=0.0, owner=owner)
    if ratio[0] <= 0.0:
        raise ValueError(
            f"{owner}: crop_ratio must have a positive minimum aspect ratio. "
            f"Received: crop_ratio={value!r}"
        )
    return ratio


def check_color_jitter(
    brightness: Any, contrast: Any, saturation: Any, hue: Any, owner: str
) -> tuple[float, float, float, float]:
    """The colour jitter strengths: non-negative, the hue shift at most half a turn."""
    return (
        check_number("brightness", brightness, low=0.0, owner=owner),
        check_number("contrast", contrast, low=0.0, owner=owner),
        check_number("saturation", saturation, low=0.0, owner=owner),
        check_number("hue", hue, low=0.0, high=0.5, owner=owner),
    )


def check_blur(sigma: Any, kernel_fraction: Any, owner: str) -> tuple[tuple[float, float], float]:
    """The blur's `(min, max)` sigma, with a positive minimum, and its kernel fraction."""
    blur_sigma = check_pair("blur_sigma", sigma, low=0.0, owner=owner)
    if blur_sigma[0] <= 0.0:
        raise ValueError(
            f"{owner}: blur_sigma must have a positive minimum. Received: blur_sigma={sigma!r}"
        )
    fraction = check_number("blur_kernel_fraction", kernel_fraction, low=0.0, high=1.0, owner=owner)
    return blur_sigma, fraction


def check_seed(seed: Any, owner: str) -> int | None:
    """`seed` as given, once checked: `None` or an integer in `[0, 2**63)`."""
    checked = check_int("seed", seed, minimum=0, allow_none=True, owner=owner)
    if checked is not None and checked >= MAX_SEED:
        raise ValueError(f"{owner}: seed must be below 2**63. Received: seed={seed}")
    return checked


def seed_generator(seed: int | None) -> tuple[int, tf.random.Generator]:
    """The seed to use (`seed`, or a random one for `None`) and the generator of call seeds."""
    used = random.SystemRandom().randrange(MAX_SEED) if seed is None else seed
    # Created eagerly: a tf.data map function cannot create variables.
    with tf.init_scope():
        generator = tf.random.Generator.from_seed(used)
    return used, generator


def call_seed(generator: tf.random.Generator, seed: int, step: int | tf.Tensor | None) -> tf.Tensor:
    """A call's stateless seed: the generator's next one, or `[seed, step]` given a step."""
    if step is None:
        return generator.make_seeds(1)[:, 0]
    return tf.stack([tf.constant(seed, tf.int64), tf.cast(step, tf.int64)])


def float_images(images: Any, owner: str, needs_static_size: str) -> tf.Tensor:
    """`images`, one or a batch, checked and as float32 in `[0, 1]`.

    `needs_static_size` says why the owner needs a static height and width.
    """
    return to_float32(checked_images(images, owner, needs_static_size))


def to_float32(images: tf.Tensor) -> tf.Tensor:
    """Float images as float32; integer images divided by their dtype's maximum."""
    if images.dtype.is_floating:
        return tf.cast(images, tf.float32)
    return tf.image.convert_image_dtype(images, tf.float32)


def checked_images(images: Any, owner: str, needs_static_size: str) -> tf.Tensor:
    """`images`, one or a batch, checked, in their own dtype (float or integer).

    `needs_static_size` says why the owner needs a static height and width.
    """
    images = tf.convert_to_tensor(images)
    if images.shape.rank not in (3, 4):
        raise ValueError(
            f"{owner} expects one image [height, width, channels] or a batch "
            f"[batch, height, width, channels]. Received shape {images.shape}."
        )
    if images.shape[-1] not in (1, 3):
        raise ValueError(
            f"{owner} expects channels-last images with 1 (grey) or 3 (RGB) channels. "
            f"Received shape {images.shape}; transpose channels-first images to channels-last."
        )
    if None in images.shape[-3:-1]:
        raise ValueError(
            f"{owner} needs images of static height and width ({needs_static_size}). "
            f"Received shape {images.shape}; resize the images or set the dataset's shape "
            "with tf.ensure_shape."
        )
    if images.dtype.is_floating or images.dtype.is_integer:
        return images
    raise ValueError(
        f"{owner} expects float images in [0, 1] or integer images. "
        f"Received dtype {images.dtype.name}."
    )
