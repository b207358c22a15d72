"""SimSiam's view pipeline (Chen & He, 2021), the same as MoCo v2's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter


def simsiam_augmenter(
    image_size: int | Sequence[int] | None = None,
    *,
    seed: int | None = None,
    **overrides: Any,
) -> ViewAugmenter:
    """Returns SimSiam's augmentation pipeline.

    As "Exploring Simple Siamese Representation Learning" (Chen & He, CVPR
    2021), which reuses MoCo v2's: random resized crop (area `(0.2, 1.0)`),
    horizontal flip (p=0.5), colour jitter (brightness, contrast, saturation
    0.4, hue 0.1; p=0.8), greyscale (p=0.2) and Gaussian blur (p=0.5, sigma
    `(0.1, 2.0)`), the same for both views.

    Args:
        image_size: Output size, an integer or `(height, width)`. Defaults to
            `None`: the input size.
        seed: Non-negative integer seed. Defaults to `None` (random).
        **overrides: Any other `ViewAugmenter` argument, replacing SimSiam's value.

    Returns:
        A `ViewAugmenter`.

    Raises:
        ValueError: If an argument is out of range.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.augmenters import simsiam_augmenter
    >>> augmenter = simsiam_augmenter(32, seed=0)
    >>> view1, view2 = augmenter(tf.random.uniform((8, 32, 32, 3)))
    >>> view1.shape
    TensorShape([8, 32, 32, 3])
    """
    arguments = {
        "crop_scale": (0.2, 1.0),
        "crop_ratio": (3 / 4, 4 / 3),
        "flip_prob": 0.5,
        "brightness": 0.4,
        "contrast": 0.4,
        "saturation": 0.4,
        "hue": 0.1,
        "jitter_prob": 0.8,
        "grayscale_prob": 0.2,
        "blur_prob": 0.5,
        "blur_sigma": (0.1, 2.0),
        "solarize_prob": 0.0,
    }
    arguments.update(overrides)
    return ViewAugmenter(image_size=image_size, seed=seed, **arguments)
