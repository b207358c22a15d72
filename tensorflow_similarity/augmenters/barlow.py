"""Barlow Twins' view pipeline (Zbontar et al., 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

# 0.17's BarlowAugmenter lived here; its call and arguments are kept in `legacy`.
from tensorflow_similarity.augmenters.legacy import BarlowAugmenter
from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter

__all__ = ["BarlowAugmenter", "augment_barlow", "barlow_augmenter"]


def barlow_augmenter(
    image_size: int | Sequence[int] | None = None,
    *,
    seed: int | None = None,
    **overrides: Any,
) -> ViewAugmenter:
    """Returns Barlow Twins' augmentation pipeline, asymmetric between views.

    As "Barlow Twins: Self-Supervised Learning via Redundancy Reduction"
    (Zbontar et al., ICML 2021), after BYOL: random resized crop (area
    `(0.08, 1.0)`), horizontal flip (p=0.5), colour jitter (brightness and
    contrast 0.4, saturation 0.2, hue 0.1; p=0.8), greyscale (p=0.2), Gaussian
    blur (sigma `(0.1, 2.0)`; p=1.0 on the first view, 0.1 on the second) and
    solarisation (p=0.0 on the first view, 0.2 on the second).

    Args:
        image_size: Output size, an integer or `(height, width)`. Defaults to
            `None`: the input size.
        seed: Non-negative integer seed. Defaults to `None` (random).
        **overrides: Any other `ViewAugmenter` argument, replacing Barlow
            Twins' value.

    Returns:
        A `ViewAugmenter`.

    Raises:
        ValueError: If an argument is out of range.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import barlow_augmenter
    >>> augmenter = barlow_augmenter(32, seed=0)
    >>> view1, view2 = augmenter(tf.random.uniform((8, 32, 32, 3)))
    >>> view1.shape
    TensorShape([8, 32, 32, 3])
    """
    arguments = {
        "crop_scale": (0.08, 1.0),
        "crop_ratio": (3 / 4, 4 / 3),
        "flip_prob": 0.5,
        "brightness": 0.4,
        "contrast": 0.4,
        "saturation": 0.2,
        "hue": 0.1,
        "jitter_prob": 0.8,
        "grayscale_prob": 0.2,
        "blur_prob": (1.0, 0.1),
        "blur_sigma": (0.1, 2.0),
        "solarize_prob": (0.0, 0.2),
    }
    arguments.update(overrides)
    return ViewAugmenter(image_size=image_size, seed=seed, **arguments)


def augment_barlow(
    image: Any,
    height: int,
    width: int,
    flip_probability: float = 0.5,
    brightness_multiplier: float = 0.8,
    contrast_multiplier: float = 0.6,
    saturation_multiplier: float = 0.6,
    hue_multiplier: float = 0.2,
    jitter_probability: float = 0.8,
    greyscale_probability: float = 0.2,
    blur_probability: float = 0.2,
    blur_min_sigma: float = 0,
    blur_max_sigma: float = 1,
    solarize_probability: float = 0.2,
    solarize_pixel_min: int = 0,
    solarize_pixel_max: int = 255,
    solarize_thresh: int = 10,
) -> tf.Tensor:
    """0.17's per-image Barlow Twins transform: one view of `image`, `BarlowAugmenter`'s.

    The same pipeline and arguments as `BarlowAugmenter` (see its
    differences from 0.17: multiplicative brightness, solarisation at 0.5,
    so the `solarize_*` arguments keep only their defaults).

    Args:
        image: One `[h, w, c]` image in `[0, 1]`.
        height: Output height.
        width: Output width.
        flip_probability: See `BarlowAugmenter`; as the arguments below.
        brightness_multiplier: Brightness strength.
        contrast_multiplier: Contrast strength.
        saturation_multiplier: Saturation strength.
        hue_multiplier: Maximum hue shift in turns.
        jitter_probability: Probability of the colour jitter.
        greyscale_probability: Probability of greyscale.
        blur_probability: Probability of the Gaussian blur.
        blur_min_sigma: Smallest blur standard deviation.
        blur_max_sigma: Largest blur standard deviation.
        solarize_probability: Probability of solarisation.
        solarize_pixel_min: Only `0`.
        solarize_pixel_max: Only `255`.
        solarize_thresh: Only `10`.

    Returns:
        The `[height, width, c]` view.

    Raises:
        ValueError: As `BarlowAugmenter`, or if `image` is not one image.
    """
    image = tf.convert_to_tensor(image)
    if image.shape.rank != 3:
        raise ValueError(
            f"augment_barlow takes one [height, width, channels] image; got shape {image.shape}. "
            "Use BarlowAugmenter for a batch."
        )
    augmenter = BarlowAugmenter(
        width,
        height,
        flip_probability,
        brightness_multiplier,
        contrast_multiplier,
        saturation_multiplier,
        hue_multiplier,
        jitter_probability,
        greyscale_probability,
        blur_probability,
        blur_min_sigma,
        blur_max_sigma,
        solarize_probability,
        solarize_pixel_min,
        solarize_pixel_max,
        solarize_thresh,
    )
    return augmenter.augment(image[tf.newaxis], None, 1)[0][0]
