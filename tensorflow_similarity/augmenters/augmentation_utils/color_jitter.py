"""0.17's colour transforms: jitter (random or fixed order), brightness, greyscale."""

from __future__ import annotations

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

__all__ = [
    "color_jitter",
    "color_jitter_nonrand",
    "color_jitter_rand",
    "random_brightness",
    "random_color_jitter",
    "to_grayscale",
]


def _check_impl(impl: str) -> None:
    if impl == "additive":
        raise ValueError(
            "impl='additive' (SimCLR v1's additive brightness) is not supported by the colour "
            "jitter, whose brightness scales the image. Use impl='multiplicative' (SimCLR v2's, "
            "0.17's default), or random_brightness(impl='additive') on its own."
        )
    if impl != "multiplicative":
        raise ValueError(f"Unknown impl {impl!r}: use 'multiplicative'.")


def color_jitter(
    image: Any,
    strength: float = 1.0,
    brightness_multiplier: float = 0.8,
    contrast_multiplier: float = 0.8,
    saturation_multiplier: float = 0.8,
    hue_multiplier: float = 0.2,
    random_order: bool = True,
    impl: str = "multiplicative",
    *,
    seed: Any = None,
) -> tf.Tensor:
    """Jitters brightness, contrast, saturation and hue, each `multiplier * strength`.

    Args:
        image: One `[0, 1]` image `[h, w, c]` or a batch `[b, h, w, c]`.
        strength: Scales every multiplier. Defaults to 1.0.
        brightness_multiplier: Defaults to 0.8.
        contrast_multiplier: Defaults to 0.8.
        saturation_multiplier: Defaults to 0.8.
        hue_multiplier: Defaults to 0.2.
        random_order: `color_jitter_rand` if `True` (default), else
            `color_jitter_nonrand`.
        impl: `"multiplicative"` (the only one supported; see
            `color_jitter_rand`).
        seed: See `random_apply.random_apply`.

    Returns:
        Float32 images of the input's shape, in `[0, 1]`.
    """
    jitter = color_jitter_rand if random_order else color_jitter_nonrand
    return jitter(
        image,
        brightness_multiplier * strength,
        contrast_multiplier * strength,
        saturation_multiplier * strength,
        hue_multiplier * strength,
        impl=impl,
        seed=seed,
    )


def color_jitter_nonrand(
    image: Any,
    brightness: float = 0.0,
    contrast: float = 0.0,
    saturation: float = 0.0,
    hue: float = 0.0,
    impl: str = "multiplicative",
    *,
    seed: Any = None,
) -> tf.Tensor:
    """Jitters brightness, then contrast, saturation and hue, clipping to `[0, 1]` after each.

    Each factor is uniform in `[max(0, 1 - s), 1 + s]`, the hue shift in
    `[-hue, hue]`, drawn per image. See `color_jitter_rand` for how each
    adjustment differs from 0.17's `tf.image` ones.

    Args:
        image: One `[0, 1]` image `[h, w, c]` or a batch `[b, h, w, c]`.
        brightness: Brightness strength. Defaults to 0.0 (unchanged).
        contrast: Contrast strength. Defaults to 0.0.
        saturation: Saturation strength. Defaults to 0.0.
        hue: Largest hue shift, at most 0.5. Defaults to 0.0.
        impl: `"multiplicative"` (the only one supported).
        seed: See `random_apply.random_apply`.

    Returns:
        Float32 images of the input's shape, in `[0, 1]`.

    Raises:
        ValueError: For `impl="additive"` or an unknown `impl`.
    """
    _check_impl(impl)
    seed = stateless_seed(seed)
    images, single = as_batch(image)
    strengths = [(brightness, 0, 0, 0), (0, contrast, 0, 0), (0, 0, saturation, 0), (0, 0, 0, hue)]
    for index, (b, c, s, h) in enumerate(strengths):
        if b or c or s or h:
            images = image_ops.random_color_jitter(images, b, c, s, h, 1.0, sub_seed(seed, index))
    return restore(images, single)


def color_jitter_rand(
    image: Any,
    brightness: float = 0.0,
    contrast: float = 0.0,
    saturation: float = 0.0,
    hue: float = 0.0,
    impl: str = "multiplicative",
    *,
    seed: Any = None,
) -> tf.Tensor:
    """Jitters brightness, contrast, saturation and hue in a random order, clipping after each.

    On `image_ops.random_color_jitter` (torchvision's `ColorJitter`): each
    image draws its own factors and order (0.17: one of each for a batch).
    Brightness scales the image, as 0.17's multiplicative one; contrast
    blends with the image's mean luma (0.17's `tf.image` contrast: with
    each channel's mean) and saturation with its luma image (0.17: HSV
    saturation scaled), the same for grey images and close for others.

    Args:
        image: One `[0, 1]` image `[h, w, c]` or a batch `[b, h, w, c]`.
        brightness: Brightness strength. Defaults to 0.0 (unchanged).
        contrast: Contrast strength. Defaults to 0.0.
        saturation: Saturation strength. Defaults to 0.0.
        hue: Largest hue shift, at most 0.5. Defaults to 0.0.
        impl: `"multiplicative"`; `"additive"` (SimCLR v1's brightness)
            raises.
        seed: See `random_apply.random_apply`.

    Returns:
        Float32 images of the input's shape, in `[0, 1]`.

    Raises:
        ValueError: For `impl="additive"` or an unknown `impl`.
    """
    _check_impl(impl)
    images, single = as_batch(image)
    images = image_ops.random_color_jitter(
        images, brightness, contrast, saturation, hue, 1.0, stateless_seed(seed)
    )
    return restore(images, single)


def to_grayscale(image: Any, keep_channels: bool = True) -> tf.Tensor:
    """Returns the luma of the image(s): on every channel, or as one channel.

    The luma weights are ITU-R 601-2's `(0.299, 0.587, 0.114)` (0.17's
    `tf.image.rgb_to_grayscale`: 0.2989 for red).

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`, `c` 3 or 1.
        keep_channels: Keep the input's channels (3 for RGB, as 0.17's
            tiling) if `True` (default); one channel if `False`.

    Returns:
        Float32 image(s).
    """
    images, single = as_batch(image)
    grey = image_ops.grayscale(images)
    if not keep_channels:
        grey = grey[..., :1]
    return restore(grey, single)


def random_brightness(
    image: Any, max_delta: float, impl: str = "multiplicative", *, seed: Any = None
) -> tf.Tensor:
    """Changes the brightness of all of `image` by one random amount (not clipped).

    As 0.17: `"multiplicative"` scales by a factor uniform in
    `[max(1 - max_delta, 0), 1 + max_delta]`; `"additive"` adds an offset
    uniform in `[-max_delta, max_delta]`.

    Args:
        image: Images of any shape.
        max_delta: The largest change.
        impl: `"multiplicative"` (default) or `"additive"`.
        seed: See `random_apply.random_apply`.

    Raises:
        ValueError: For another `impl`.
    """
    image = tf.convert_to_tensor(image)
    seed = stateless_seed(seed)
    if impl == "multiplicative":
        low, high = max(1.0 - max_delta, 0.0), 1.0 + max_delta
        return image * tf.cast(tf.random.stateless_uniform([], seed, low, high), image.dtype)
    if impl == "additive":
        delta = tf.random.stateless_uniform([], seed, -max_delta, max_delta)
        return image + tf.cast(delta, image.dtype)
    raise ValueError(f"Unknown impl {impl!r}: use 'multiplicative' or 'additive'.")


def random_color_jitter(
    image: Any,
    p_execute: float = 1.0,
    p_jitter: float = 0.8,
    brightness_multiplier: float = 0.8,
    contrast_multiplier: float = 0.8,
    saturation_multiplier: float = 0.8,
    hue_multiplier: float = 0.2,
    p_grey: float = 0.2,
    strength: float = 1.0,
    impl: str = "multiplicative",
    *,
    seed: Any = None,
) -> tf.Tensor:
    """With probability `p_execute`: `color_jitter` with probability `p_jitter`, then
    greyscale with probability `p_grey`.

    Each of the three draws is shared by a batch, as in 0.17.

    Args:
        image: One `[0, 1]` image `[h, w, c]` or a batch `[b, h, w, c]`.
        p_execute: Probability of doing anything. Defaults to 1.0.
        p_jitter: Probability of the jitter. Defaults to 0.8.
        brightness_multiplier: See `color_jitter`. Defaults to 0.8.
        contrast_multiplier: See `color_jitter`. Defaults to 0.8.
        saturation_multiplier: See `color_jitter`. Defaults to 0.8.
        hue_multiplier: See `color_jitter`. Defaults to 0.2.
        p_grey: Probability of the greyscale. Defaults to 0.2.
        strength: See `color_jitter`. Defaults to 1.0.
        impl: See `color_jitter`.
        seed: See `random_apply.random_apply`.

    Returns:
        Float32 images of the input's shape.
    """
    _check_impl(impl)
    seed = stateless_seed(seed)
    images, single = as_batch(image)

    def jitter(x: tf.Tensor) -> tf.Tensor:
        return color_jitter(
            x,
            strength,
            brightness_multiplier,
            contrast_multiplier,
            saturation_multiplier,
            hue_multiplier,
            impl=impl,
            seed=sub_seed(seed, 3),
        )

    def transform(x: tf.Tensor) -> tf.Tensor:
        x = random_apply(jitter, p_jitter, x, seed=sub_seed(seed, 1))
        return random_apply(to_grayscale, p_grey, x, seed=sub_seed(seed, 2))

    return restore(random_apply(transform, p_execute, images, seed=sub_seed(seed, 0)), single)
