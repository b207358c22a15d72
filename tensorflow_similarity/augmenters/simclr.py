"""SimCLR's view pipeline (Chen et al., 2020)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# 0.17's SimCLRAugmenter lived here; its call and arguments are kept in `legacy`.
from tensorflow_similarity.augmenters.legacy import SimCLRAugmenter
from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter

__all__ = ["SimCLRAugmenter", "simclr_augmenter"]


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
