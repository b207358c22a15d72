"""Per-image random parameters of `image_ops`' transforms, drawn from stateless seeds.

Each `draw_*` function (and `crop_boxes`, `bernoulli_mask`) draws one
transform's parameters for `batch` images from a `seed`, an integer tensor of
shape `[2]` as `tf.random.stateless_uniform` expects; the draws are a pure
function of `(batch, seed)`. `image_ops`' `random_*` functions draw here and
then apply; the view augmenters draw every view's parameters first and then
run each transform once over all the views (`_pipeline.make_views`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import tensorflow as tf

# torchvision's RandomResizedCrop tries this many (scale, ratio) draws before
# falling back to a central crop.
_CROP_ATTEMPTS = 10


def _uniform(
    seed: tf.Tensor, batch: tf.Tensor | int, low: float, high: float, extra: Sequence[int] = ()
) -> tf.Tensor:
    return tf.random.stateless_uniform(
        tf.concat([[batch], tf.constant(list(extra), tf.int32)], axis=0),
        seed=seed,
        minval=low,
        maxval=high,
        dtype=tf.float32,
    )


def _sub_seed(seed: tf.Tensor, index: int) -> tf.Tensor:
    return tf.random.experimental.stateless_fold_in(seed, index)


def bernoulli_mask(batch: tf.Tensor | int, probability: float, seed: tf.Tensor) -> tf.Tensor:
    """Draws one Boolean per image, `True` with the given probability.

    Args:
        batch: Number of images.
        probability: Probability of `True`, in `[0, 1]`.
        seed: Integer tensor of shape `[2]`.

    Returns:
        A `bool` tensor of shape `[batch]`.
    """
    return _uniform(seed, batch, 0.0, 1.0) < probability


def crop_boxes(
    batch: tf.Tensor | int,
    image_size: Sequence[int],
    size: tuple[int, int],
    scale: tuple[float, float],
    ratio: tuple[float, float],
    seed: tf.Tensor,
) -> tf.Tensor:
    """Draws `random_resized_crop`'s boxes, for `crop_to_boxes`.

    Args:
        batch: Number of images.
        image_size: The input images' `(height, width)`.
        size: Output `(height, width)`.
        scale: `(min, max)` fraction of the image area to crop.
        ratio: `(min, max)` aspect ratio of the crop.
        seed: Integer tensor of shape `[2]`.

    Returns:
        A `[batch, 4]` float32 tensor of `tf.image.crop_and_resize` boxes on
        the images padded by one pixel on each side.
    """
    height, width = int(image_size[0]), int(image_size[1])
    area = float(height * width)
    shape = (_CROP_ATTEMPTS,)
    target_area = area * _uniform(_sub_seed(seed, 0), batch, scale[0], scale[1], shape)
    log_ratio = _uniform(_sub_seed(seed, 1), batch, math.log(ratio[0]), math.log(ratio[1]), shape)
    aspect = tf.exp(log_ratio)
    crop_w = tf.sqrt(target_area * aspect)
    crop_h = tf.sqrt(target_area / aspect)
    fits = (crop_w <= width) & (crop_h <= height)
    first_fit = tf.argmax(tf.cast(fits, tf.int32), axis=1, output_type=tf.int32)
    any_fit = tf.reduce_any(fits, axis=1)
    crop_w = tf.gather(crop_w, first_fit, batch_dims=1)
    crop_h = tf.gather(crop_h, first_fit, batch_dims=1)

    in_ratio = width / height
    if in_ratio < ratio[0]:
        fallback_w, fallback_h = float(width), width / ratio[0]
    elif in_ratio > ratio[1]:
        fallback_w, fallback_h = height * ratio[1], float(height)
    else:
        fallback_w, fallback_h = float(width), float(height)
    crop_w = tf.where(any_fit, crop_w, fallback_w)
    crop_h = tf.where(any_fit, crop_h, fallback_h)

    position = _uniform(_sub_seed(seed, 2), batch, 0.0, 1.0, (2,))
    top = tf.where(any_fit, position[:, 0] * (height - crop_h), (height - crop_h) / 2)
    left = tf.where(any_fit, position[:, 1] * (width - crop_w), (width - crop_w) / 2)

    # crop_and_resize samples box corners exactly and writes the extrapolation
    # value outside the image. Output pixel k's centre is half a step inside the
    # crop; a one-pixel edge-replicating border keeps those centres in range
    # and reproduces tf.image.resize's half-pixel, clamp-to-edge sampling.
    out_h, out_w = size
    y1 = (top + 0.5 * crop_h / out_h + 0.5) / (height + 1)
    y2 = (top + crop_h - 0.5 * crop_h / out_h + 0.5) / (height + 1)
    x1 = (left + 0.5 * crop_w / out_w + 0.5) / (width + 1)
    x2 = (left + crop_w - 0.5 * crop_w / out_w + 0.5) / (width + 1)
    return tf.stack([y1, x1, y2, x2], axis=1)


class JitterDraws(NamedTuple):
    """`random_color_jitter`'s per-image draws, from `draw_color_jitter`.

    Attributes:
        factors: `[batch, 3]` brightness, contrast and saturation factors.
        hue_shift: `[batch]` hue shifts, in turns.
        apply: `[batch]` bool, whether each image is jittered.
        order: `[batch, 4]` each image's operations in its order (0
            brightness, 1 contrast, 2 saturation, 3 hue).
    """

    factors: tf.Tensor
    hue_shift: tf.Tensor
    apply: tf.Tensor
    order: tf.Tensor


def draw_color_jitter(
    batch: tf.Tensor | int,
    brightness: float,
    contrast: float,
    saturation: float,
    hue: float,
    probability: float,
    seed: tf.Tensor,
) -> JitterDraws:
    """Draws `random_color_jitter`'s parameters for `batch` images (same arguments)."""
    factors = tf.stack(
        [
            _uniform(_sub_seed(seed, 0), batch, max(0.0, 1.0 - brightness), 1.0 + brightness),
            _uniform(_sub_seed(seed, 1), batch, max(0.0, 1.0 - contrast), 1.0 + contrast),
            _uniform(_sub_seed(seed, 2), batch, max(0.0, 1.0 - saturation), 1.0 + saturation),
        ],
        axis=1,
    )
    return JitterDraws(
        factors=factors,
        hue_shift=_uniform(_sub_seed(seed, 3), batch, -hue, hue),
        apply=bernoulli_mask(batch, probability, _sub_seed(seed, 4)),
        order=tf.argsort(_uniform(_sub_seed(seed, 5), batch, 0.0, 1.0, (4,)), axis=1),
    )


def draw_gaussian_blur(
    batch: tf.Tensor | int, sigma: tuple[float, float], probability: float, seed: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Draws `random_gaussian_blur`'s `[batch]` standard deviations and `[batch]` bool choices."""
    std = _uniform(_sub_seed(seed, 0), batch, sigma[0], sigma[1])
    return std, bernoulli_mask(batch, probability, _sub_seed(seed, 1))
