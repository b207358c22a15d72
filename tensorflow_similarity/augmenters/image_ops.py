"""Per-image random image transformations for batches, driven by stateless seeds.

Each `random_*` function takes a batch `images` of shape
`[batch, height, width, channels]` (float32, values in `[0, 1]`, channels 1 or
3) and a `seed`, an integer tensor of shape `[2]` as
`tf.random.stateless_uniform` expects. Each image of the
batch draws its own parameters, and the result is a pure function of
`(images, seed)`: the same seed gives the same output, eagerly, inside
`tf.function` and inside `tf.data` map functions alike.

The parameterisations follow torchvision, which the SimCLR, SimSiam and Barlow
Twins reference pipelines use (SimCLR describes the same transforms in its
appendix A). One-channel images are treated as grey RGB images, for which
saturation, hue and greyscale conversion are the identity.

Each function draws its parameters with `view_draws` and then applies them:
the view augmenters draw for all their views first and apply each transform
once over every view.
"""

from __future__ import annotations

import tensorflow as tf

# The parameters are drawn in `view_draws`; they stay importable from here too.
from tensorflow_similarity.augmenters.view_draws import (
    JitterDraws,
    bernoulli_mask,
    crop_boxes,
    draw_color_jitter,
    draw_gaussian_blur,
)

# ITU-R 601-2 luma, as torchvision's rgb_to_grayscale and PIL's convert("L").
LUMA_WEIGHTS = (0.299, 0.587, 0.114)


def _per_image(mask: tf.Tensor, if_true: tf.Tensor, if_false: tf.Tensor) -> tf.Tensor:
    return tf.where(mask[:, None, None, None], if_true, if_false)


def grayscale(images: tf.Tensor) -> tf.Tensor:
    """Returns the luma of each image, repeated over the input's channels.

    Args:
        images: `[batch, height, width, channels]` float images, channels 1 or 3.

    Returns:
        Images of the same shape whose channels all equal the luma.
    """
    if images.shape[-1] == 1:
        return images
    return tf.broadcast_to(_luma(images), tf.shape(images))


def _luma(images: tf.Tensor) -> tf.Tensor:
    if images.shape[-1] == 1:
        return images
    return tf.reduce_sum(images * tf.constant(LUMA_WEIGHTS, images.dtype), axis=-1, keepdims=True)


def random_resized_crop(
    images: tf.Tensor,
    size: tuple[int, int],
    scale: tuple[float, float],
    ratio: tuple[float, float],
    seed: tf.Tensor,
) -> tf.Tensor:
    """Crops a random area and aspect ratio of each image and resizes it to `size`.

    As torchvision's `RandomResizedCrop`: the crop covers a fraction of the
    image area drawn uniformly from `scale`, with an aspect ratio (width over
    height) drawn log-uniformly from `ratio`, at a uniformly random position;
    draws whose crop does not fit are retried (10 times), then a central crop
    of the largest allowed aspect ratio is used. Crop boxes are continuous
    (not rounded to pixels) and resized bilinearly with half-pixel centres, so
    a crop of the whole image equals `tf.image.resize(images, size)`.

    Args:
        images: `[batch, height, width, channels]` float images with static
            height and width.
        size: Output `(height, width)`.
        scale: `(min, max)` fraction of the image area to crop.
        ratio: `(min, max)` aspect ratio of the crop.
        seed: Integer tensor of shape `[2]`.

    Returns:
        A `[batch, size[0], size[1], channels]` float32 tensor, clipped to `[0, 1]`.
    """
    boxes = crop_boxes(tf.shape(images)[0], images.shape[1:3], size, scale, ratio, seed)
    return crop_to_boxes(images, boxes, size)


def crop_to_boxes(
    images: tf.Tensor,
    boxes: tf.Tensor,
    size: tuple[int, int],
    box_indices: tf.Tensor | None = None,
) -> tf.Tensor:
    """Crops `crop_boxes`' boxes out of `images` and resizes them bilinearly to `size`.

    Args:
        images: `[batch, height, width, channels]` float images.
        boxes: `[n, 4]` boxes from `crop_boxes`.
        size: Output `(height, width)`.
        box_indices: `[n]` index of the image each box crops. Defaults to
            `None`: box `i` crops image `i`.

    Returns:
        A `[n, size[0], size[1], channels]` float32 tensor, clipped to `[0, 1]`.
    """
    if box_indices is None:
        box_indices = tf.range(tf.shape(boxes)[0])
    return crop_padded(pad_for_crop(images), boxes, size, box_indices)


def pad_for_crop(images: tf.Tensor) -> tf.Tensor:
    """`images` with the one-pixel edge-replicating border `crop_boxes`' boxes lie on."""
    return tf.pad(images, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="SYMMETRIC")


def crop_padded(
    padded: tf.Tensor, boxes: tf.Tensor, size: tuple[int, int], box_indices: tf.Tensor
) -> tf.Tensor:
    """`crop_to_boxes` of images already through `pad_for_crop`."""
    crops = tf.image.crop_and_resize(padded, boxes, box_indices, list(size), method="bilinear")
    # Interpolating as `a + (b - a) * t` can round above the larger of a and b.
    return tf.clip_by_value(crops, 0.0, 1.0)


def random_flip_left_right(images: tf.Tensor, probability: float, seed: tf.Tensor) -> tf.Tensor:
    """Mirrors each image horizontally with the given probability.

    Args:
        images: `[batch, height, width, channels]` images.
        probability: Probability of flipping an image.
        seed: Integer tensor of shape `[2]`.

    Returns:
        Images of the same shape.
    """
    flip = bernoulli_mask(tf.shape(images)[0], probability, seed)
    return _per_image(flip, tf.reverse(images, axis=[2]), images)


def _adjust_hue(images: tf.Tensor, delta: tf.Tensor) -> tf.Tensor:
    hsv = tf.image.rgb_to_hsv(images)
    hue = tf.math.floormod(hsv[..., 0] + delta[:, None, None], 1.0)
    return tf.clip_by_value(
        tf.image.hsv_to_rgb(tf.stack([hue, hsv[..., 1], hsv[..., 2]], axis=-1)), 0.0, 1.0
    )


def _blend_step(
    images: tf.Tensor, operation: tf.Tensor, factors: tf.Tensor, active: tf.Tensor
) -> tf.Tensor:
    # Brightness, contrast and saturation (operations 0, 1, 2) are all blends
    # `f * x + (1 - f) * target`, with targets black, the mean luma and the luma
    # image: one blend serves whichever of them each image draws. An inactive
    # image gets `f = 1` and target 0, which leaves it unchanged.
    factor = tf.gather(factors, tf.minimum(operation, 2), batch_dims=1)
    factor = tf.where(active, factor, 1.0)[:, None, None, None]
    luma = _luma(images)
    mean_luma = tf.reduce_mean(luma, axis=[1, 2, 3], keepdims=True)
    luma_weight = tf.cast(active & (operation == 2), images.dtype)[:, None, None, None]
    mean_weight = tf.cast(active & (operation == 1), images.dtype)[:, None, None, None]
    target = luma_weight * luma + mean_weight * mean_luma
    return tf.clip_by_value(factor * images + (1.0 - factor) * target, 0.0, 1.0)


def random_color_jitter(
    images: tf.Tensor,
    brightness: float,
    contrast: float,
    saturation: float,
    hue: float,
    probability: float,
    seed: tf.Tensor,
) -> tf.Tensor:
    """Randomly changes brightness, contrast, saturation and hue, in random order.

    As torchvision's `ColorJitter` wrapped in `RandomApply(p=probability)`:
    each selected image draws a brightness, contrast and saturation factor
    uniformly from `[max(0, 1 - s), 1 + s]` and a hue shift uniformly from
    `[-hue, hue]` (in turns of the colour wheel), and applies the four
    adjustments in its own random order, clipping to `[0, 1]` after each.
    Brightness scales the image; contrast blends it with its mean luma;
    saturation blends it with its luma image; hue rotates the HSV hue.

    The batch goes through one HSV round trip, not one per position: each
    image's adjustments drawn before its hue shift run first (three blend
    passes over the batch, a pass leaving unchanged the images with nothing
    left to do), then every hue shift at once, then the adjustments drawn
    after it. Each image goes through the same operations as when the four
    positions run one after another, so the output is the same.

    Args:
        images: `[batch, height, width, channels]` float images in `[0, 1]`.
        brightness: Brightness strength `s >= 0`.
        contrast: Contrast strength `s >= 0`.
        saturation: Saturation strength `s >= 0`.
        hue: Maximum hue shift, in `[0, 0.5]`.
        probability: Probability that an image is jittered at all.
        seed: Integer tensor of shape `[2]`.

    Returns:
        Images of the same shape.
    """
    draws = draw_color_jitter(
        tf.shape(images)[0], brightness, contrast, saturation, hue, probability, seed
    )
    return color_jitter(images, draws, with_hue=hue > 0)


def color_jitter(images: tf.Tensor, draws: JitterDraws, with_hue: bool = True) -> tf.Tensor:
    """Applies drawn colour jitter to a batch, as `random_color_jitter` describes.

    Args:
        images: `[batch, height, width, channels]` float images in `[0, 1]`.
        draws: One draw per image, from `draw_color_jitter`.
        with_hue: Whether the hue shifts apply. Defaults to True; grey
            (1-channel) images skip them either way.

    Returns:
        Images of the same shape.
    """
    factors, hue_shift, apply, order = draws
    hue_position = tf.argmax(tf.cast(order == 3, tf.int32), axis=1, output_type=tf.int32)
    # The k-th of the three blends of each image, in its order without the hue.
    blends = [
        tf.gather(order, k + tf.cast(k >= hue_position, tf.int32), batch_dims=1) for k in range(3)
    ]
    # Hue cannot change a grey image; skipping it also avoids HSV conversions,
    # which need three channels.
    if images.shape[-1] == 1 or not with_hue:
        for operation in blends:
            images = _blend_step(images, operation, factors, apply)
        return images
    for k, operation in enumerate(blends):
        images = _blend_step(images, operation, factors, apply & (k < hue_position))
    images = _per_image(apply, _adjust_hue(images, hue_shift), images)
    for k, operation in enumerate(blends):
        images = _blend_step(images, operation, factors, apply & (k >= hue_position))
    return images


def random_grayscale(images: tf.Tensor, probability: float, seed: tf.Tensor) -> tf.Tensor:
    """Replaces each image by its luma (on every channel) with the given probability.

    Args:
        images: `[batch, height, width, channels]` float images.
        probability: Probability of converting an image.
        seed: Integer tensor of shape `[2]`.

    Returns:
        Images of the same shape.
    """
    convert = bernoulli_mask(tf.shape(images)[0], probability, seed)
    return _per_image(convert, grayscale(images), images)


def blur_kernel_size(length: int, fraction: float = 0.1) -> int:
    """Returns the odd Gaussian-blur kernel size for an image side.

    SimCLR (appendix A) uses a kernel of 10% of the image side; as its
    reference code, the size is `2 * (int(fraction * length) // 2) + 1`, but at
    least 3 so small images (32x32) are still blurred, and at most the largest
    odd size whose reflect padding fits in the image.

    Args:
        length: Image height or width in pixels.
        fraction: Kernel size as a fraction of `length`.

    Returns:
        An odd kernel size, 1 for images narrower than 2 pixels.
    """
    radius = max(1, int(fraction * length) // 2)
    radius = min(radius, length - 1)
    return 2 * radius + 1


def random_gaussian_blur(
    images: tf.Tensor,
    sigma: tuple[float, float],
    probability: float,
    seed: tf.Tensor,
    kernel_size: tuple[int, int] | None = None,
) -> tf.Tensor:
    """Blurs each image with a Gaussian of random width, with the given probability.

    Each selected image draws a standard deviation uniformly from `sigma` (in
    pixels) and is convolved, separably, with the normalised Gaussian kernel
    of that width, using reflect padding (as torchvision's `GaussianBlur`).
    Blurred images are clipped to `[0, 1]`, which rounding could leave by a
    few units in the last place.

    Args:
        images: `[batch, height, width, channels]` float images with static
            height and width.
        sigma: `(min, max)` standard deviation in pixels.
        probability: Probability of blurring an image.
        seed: Integer tensor of shape `[2]`.
        kernel_size: `(height, width)` odd kernel sizes. Defaults to 10% of
            each image side (see `blur_kernel_size`).

    Returns:
        Images of the same shape.
    """
    if kernel_size is None:
        kernel_size = (blur_kernel_size(images.shape[1]), blur_kernel_size(images.shape[2]))
    std, apply = draw_gaussian_blur(tf.shape(images)[0], sigma, probability, seed)
    return _per_image(apply, gaussian_blur(images, std, kernel_size), images)


def gaussian_blur(images: tf.Tensor, std: tf.Tensor, kernel_size: tuple[int, int]) -> tf.Tensor:
    """Blurs every image with its own Gaussian, as `random_gaussian_blur` describes.

    Args:
        images: `[batch, height, width, channels]` float images with static
            height, width and channels.
        std: `[batch]` standard deviations in pixels.
        kernel_size: `(height, width)` odd kernel sizes.

    Returns:
        Images of the same shape, clipped to `[0, 1]`.
    """
    height, width, channels = images.shape[1], images.shape[2], images.shape[3]
    batch = tf.shape(images)[0]
    # One depthwise convolution per axis serves the whole batch: the images
    # become the channels of a single image, each with its own kernel.
    stacked = tf.transpose(images, [1, 2, 0, 3])
    stacked = tf.reshape(stacked, [1, height, width, batch * channels])
    for axis, size in ((1, kernel_size[0]), (2, kernel_size[1])):
        radius = (size - 1) // 2
        if radius == 0:
            continue
        weights = gaussian_weights(std, size)
        # [batch * channels, size]: each image's kernel, once per channel.
        weights = tf.reshape(tf.repeat(weights, channels, axis=0), [-1, size])
        kernel_shape = [size, 1, -1, 1] if axis == 1 else [1, size, -1, 1]
        kernel = tf.reshape(tf.transpose(weights), kernel_shape)
        padding = [[0, 0]] * 4
        padding[axis] = [radius, radius]
        stacked = tf.pad(stacked, padding, mode="REFLECT")
        stacked = tf.nn.depthwise_conv2d(stacked, kernel, [1, 1, 1, 1], "VALID")
    blurred = tf.reshape(stacked, [height, width, batch, channels])
    # Weights summing to one can still round a pixel of 1 above 1.
    return tf.clip_by_value(tf.transpose(blurred, [2, 0, 1, 3]), 0.0, 1.0)


def gaussian_weights(std: tf.Tensor, size: int) -> tf.Tensor:
    """`[n, size]` normalised Gaussian kernels of odd `size`, one per deviation in `std`."""
    radius = (size - 1) // 2
    offsets = tf.range(-radius, radius + 1, dtype=tf.float32)
    weights = tf.exp(-0.5 * tf.square(offsets[None, :] / std[:, None]))
    return weights / tf.reduce_sum(weights, axis=1, keepdims=True)


def solarize(images: tf.Tensor, threshold: float = 0.5) -> tf.Tensor:
    """Inverts the values at or above `threshold`: `v` becomes `1 - v`."""
    return tf.where(images >= threshold, 1.0 - images, images)


def random_solarize(
    images: tf.Tensor, probability: float, seed: tf.Tensor, threshold: float = 0.5
) -> tf.Tensor:
    """Inverts the pixels at or above `threshold`, per image with the given probability.

    As PIL's `ImageOps.solarize` (threshold 128 of 255) used by Barlow Twins
    and BYOL: a value `v >= threshold` becomes `1 - v`.

    Args:
        images: `[batch, height, width, channels]` float images in `[0, 1]`.
        probability: Probability of solarising an image.
        seed: Integer tensor of shape `[2]`.
        threshold: Values at or above it are inverted. Defaults to `0.5`.

    Returns:
        Images of the same shape.
    """
    apply = bernoulli_mask(tf.shape(images)[0], probability, seed)
    return _per_image(apply, solarize(images, threshold), images)
