"""Barlow Twins' view pipeline (Zbontar et al., 2021)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# 0.17's BarlowAugmenter lived here; its call and arguments are kept in `legacy`.
from tensorflow_similarity.augmenters.legacy import BarlowAugmenter
from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter

__all__ = ["BarlowAugmenter", "barlow_augmenter"]


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
