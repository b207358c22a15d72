"""0.17's random flips: `random_random_flip_left_right`, `random_random_flip_top_bottom`."""

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

__all__ = ["random_random_flip_left_right", "random_random_flip_top_bottom"]


def _random_flip(image: Any, p: float, axis: int, seed: Any) -> tf.Tensor:
    seed = stateless_seed(seed)
    images, single = as_batch(image)

    def flip(images: tf.Tensor) -> tf.Tensor:
        mask = image_ops.bernoulli_mask(tf.shape(images)[0], 0.5, sub_seed(seed, 1))
        return tf.where(mask[:, None, None, None], tf.reverse(images, axis=[axis]), images)

    return restore(random_apply(flip, p, images, seed=sub_seed(seed, 0)), single)


def random_random_flip_left_right(image: Any, p: float = 0.5, *, seed: Any = None) -> tf.Tensor:
    """With probability `p`, mirrors each image horizontally with probability 1/2.

    As 0.17 (a random flip inside `random_apply`): an image is mirrored with
    probability `p / 2`; the first draw is shared by a batch, the second is
    each image's.

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`.
        p: Probability of the random flip being applied. Defaults to 0.5.
        seed: See `random_apply`.

    Returns:
        Float32 images of the input's shape.
    """
    return _random_flip(image, p, 2, seed)


def random_random_flip_top_bottom(image: Any, p: float = 0.5, *, seed: Any = None) -> tf.Tensor:
    """With probability `p`, mirrors each image vertically with probability 1/2.

    See `random_random_flip_left_right`.

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`.
        p: Probability of the random flip being applied. Defaults to 0.5.
        seed: See `random_apply`.

    Returns:
        Float32 images of the input's shape.
    """
    return _random_flip(image, p, 1, seed)
