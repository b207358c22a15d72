"""SimCLR's view pipeline (Chen et al., 2020)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tensorflow_similarity.augmenters.augmentation_utils.color_jitter import random_color_jitter
from tensorflow_similarity.augmenters.augmentation_utils.cropping import (
    center_crop,
    random_crop_with_resize,
)

# 0.17's SimCLRAugmenter lived here; its call and arguments are kept in `legacy`.
from tensorflow_similarity.augmenters.legacy import SimCLRAugmenter
from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter

__all__ = [
    "SimCLRAugmenter",
    "simclr_augmenter",
    "simclr_eval_augmentation",
    "simclr_training_augmentation",
]


def simclr_augmenter(
    image_size: int | Sequence[int] | None = None,
    *,
    color_strength: float = 1.0,
    seed: int | None = None,
    **overrides: Any,
) -> ViewAugmenter:
    """Returns SimCLR's augmentation pipeline.

    As "A Simple Framework for Contrastive Learning of Visual Representations"
    (Chen et al., ICML 2020), appendix A: random resized crop (area
    `(0.08, 1.0)`, aspect ratio `(3/4, 4/3)`), horizontal flip (p=0.5), colour
    jitter of strength `s` (brightness, contrast, saturation `0.8 s`, hue
    `0.2 s`; p=0.8), greyscale (p=0.2) and Gaussian blur (p=0.5, sigma
    `(0.1, 2.0)`, kernel 10% of the image side), the same for both views.
    SimCLR drops the blur on CIFAR-10: pass `blur_prob=0.0`.

    Args:
        image_size: Output size, an integer or `(height, width)`. Defaults to
            `None`: the input size.
        color_strength: The colour-distortion strength `s`. Defaults to `1.0`
            (SimCLR's ImageNet value; it uses 0.5 on CIFAR-10).
        seed: Non-negative integer seed. Defaults to `None` (random).
        **overrides: Any other `ViewAugmenter` argument, replacing SimCLR's value.

    Returns:
        A `ViewAugmenter`.

    Raises:
        ValueError: If an argument is out of range.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import simclr_augmenter
    >>> augmenter = simclr_augmenter(32, color_strength=0.5, blur_prob=0.0, seed=0)
    >>> view1, view2 = augmenter(tf.random.uniform((8, 32, 32, 3)))
    >>> view1.shape
    TensorShape([8, 32, 32, 3])
    """
    if isinstance(color_strength, bool) or not isinstance(color_strength, (int, float)):
        raise ValueError(f"color_strength must be a number >= 0. Received: {color_strength!r}")
    if color_strength < 0:
        raise ValueError(f"color_strength must be >= 0. Received: {color_strength!r}")
    arguments = {
        "crop_scale": (0.08, 1.0),
        "crop_ratio": (3 / 4, 4 / 3),
        "flip_prob": 0.5,
        "brightness": 0.8 * color_strength,
        "contrast": 0.8 * color_strength,
        "saturation": 0.8 * color_strength,
        "hue": min(0.5, 0.2 * color_strength),
        "jitter_prob": 0.8,
        "grayscale_prob": 0.2,
        "blur_prob": 0.5,
        "blur_sigma": (0.1, 2.0),
        "solarize_prob": 0.0,
    }
    arguments.update(overrides)
    return ViewAugmenter(image_size=image_size, seed=seed, **arguments)


def simclr_training_augmentation(
    image: Any,
    height: int,
    width: int,
    color_distort: bool = True,
    jitter_stength: float = 1.0,
    crop: bool = True,
    flip: bool = True,
    impl: str = "multiplicative",
) -> tf.Tensor:
    """0.17's SimCLR training transform of one `[0, 1]` RGB image.

    A random resized crop to `(height, width)`, a horizontal flip and the
    colour jitter with greyscale, each optional, as 0.17 chained them from
    `augmentation_utils` (so with those functions' differences from 0.17:
    per-image draws, torchvision's crop and jitter; `impl="additive"`
    raises).

    Args:
        image: One `[h, w, 3]` image in `[0, 1]`.
        height: Output height.
        width: Output width.
        color_distort: Whether to jitter the colours. Defaults to True.
        jitter_stength: The jitter's strength (0.17's spelling). Defaults
            to 1.0.
        crop: Whether to crop. Defaults to True; without it the image must
            already be `(height, width)`.
        flip: Whether to flip left-right at random. Defaults to True.
        impl: `"multiplicative"` (default).

    Returns:
        The `[height, width, 3]` image, clipped to `[0, 1]`.
    """
    if crop:
        image = random_crop_with_resize(image, height, width)
    if flip:
        image = tf.image.random_flip_left_right(image)
    if color_distort:
        image = random_color_jitter(image, strength=jitter_stength, impl=impl)
    image = tf.reshape(image, [height, width, 3])
    return tf.clip_by_value(image, 0.0, 1.0)


def simclr_eval_augmentation(
    image: Any,
    height: int,
    width: int,
    crop: bool = True,
    crop_proportion: float = 0.875,
) -> tf.Tensor:
    """0.17's SimCLR evaluation transform of one `[0, 1]` RGB image: a centre crop.

    Args:
        image: One `[h, w, 3]` image in `[0, 1]`.
        height: Output height.
        width: Output width.
        crop: Whether to centre-crop (`augmentation_utils.cropping.center_crop`)
            and resize. Defaults to True; without it the image must already
            be `(height, width)`.
        crop_proportion: The kept proportion. Defaults to 0.875.

    Returns:
        The `[height, width, 3]` image, clipped to `[0, 1]`.
    """
    if crop:
        image = center_crop(image, height, width, crop_proportion=crop_proportion)
    image = tf.reshape(image, [height, width, 3])
    return tf.clip_by_value(image, 0.0, 1.0)
