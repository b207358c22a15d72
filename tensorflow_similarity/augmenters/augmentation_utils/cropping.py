"""0.17's crops: central, random (SimCLR's and a square one) and the bounding-box sampler."""

from __future__ import annotations

import warnings
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
    "center_crop",
    "crop_and_resize",
    "crop_random_resized_crop",
    "distorted_bounding_box_crop",
    "random_crop_with_resize",
    "random_resized_crop",
]


def center_crop(image: Any, height: int, width: int, crop_proportion: float) -> tf.Tensor:
    """Crops the centre of the image(s) to the output's aspect ratio and resizes (bicubic).

    The crop keeps `crop_proportion` of the image along its less-cropped
    side, with the aspect ratio `width / height` of the output. 0.17 used
    `height / width`, so a non-square output came from a crop of the inverse
    shape, stretched (a 100x100 image to 32x64 with proportion 0.875: a
    88x44 crop, stretched 4x, where here it is 44x88); such a call warns.

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`.
        height: Output height.
        width: Output width.
        crop_proportion: Fraction of the image kept along the less-cropped
            side.

    Returns:
        Float32 image(s) `[height, width, c]`.
    """
    if height != width:
        warnings.warn(
            f"center_crop(height={height}, width={width}) crops to the output's aspect ratio; "
            "0.17 cropped to the inverse one and stretched the crop.",
            UserWarning,
            stacklevel=2,
        )
    images, single = as_batch(image)
    shape = tf.shape(images)
    image_h, image_w = tf.cast(shape[1], tf.float32), tf.cast(shape[2], tf.float32)
    aspect = width / height
    wider = aspect > image_w / image_h
    crop_h = tf.where(wider, crop_proportion / aspect * image_w, crop_proportion * image_h)
    crop_w = tf.where(wider, crop_proportion * image_w, crop_proportion * aspect * image_h)
    crop_h = tf.cast(tf.math.rint(crop_h), tf.int32)
    crop_w = tf.cast(tf.math.rint(crop_w), tf.int32)
    top = (shape[1] - crop_h + 1) // 2
    left = (shape[2] - crop_w + 1) // 2
    images = tf.image.crop_to_bounding_box(images, top, left, crop_h, crop_w)
    return restore(tf.image.resize(images, [height, width], method="bicubic"), single)


def distorted_bounding_box_crop(
    image: Any,
    bbox: Any,
    min_object_covered: float = 0.1,
    aspect_ratio_range: tuple[float, float] = (0.75, 1.33),
    area_range: tuple[float, float] = (0.05, 1.0),
    max_attempts: int = 100,
    scope: str | None = None,
    *,
    seed: Any = None,
) -> tf.Tensor:
    """Crops one image to a random box from `tf.image.stateless_sample_distorted_bounding_box`.

    0.17's function, on the stateless sampler: the arguments mean what
    `tf.image.sample_distorted_bounding_box`'s do; the whole image is used
    when no box fits.

    Args:
        image: One image `[h, w, c]`.
        bbox: `[1, num_boxes, 4]` boxes `[ymin, xmin, ymax, xmax]` in
            `[0, 1]`; with none, the whole image.
        min_object_covered: Fraction of a box the crop must cover. Defaults
            to 0.1.
        aspect_ratio_range: Range of the crop's width / height. Defaults to
            `(0.75, 1.33)`.
        area_range: Range of the crop's fraction of the image. Defaults to
            `(0.05, 1.0)`.
        max_attempts: Draws before using the whole image. Defaults to 100.
        scope: Name scope. Defaults to `"distorted_bounding_box_crop"`.
        seed: See `random_apply.random_apply`.

    Returns:
        The crop, of the image's dtype and a random size.
    """
    image = tf.convert_to_tensor(image)
    with tf.name_scope(scope or "distorted_bounding_box_crop"):
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.shape(image),
            bounding_boxes=bbox,
            seed=stateless_seed(seed),
            min_object_covered=min_object_covered,
            aspect_ratio_range=aspect_ratio_range,
            area_range=area_range,
            max_attempts=max_attempts,
            use_image_if_no_bounding_boxes=True,
        )
        top, left, _ = tf.unstack(begin)
        crop_h, crop_w, _ = tf.unstack(size)
        return tf.image.crop_to_bounding_box(image, top, left, crop_h, crop_w)


def crop_and_resize(
    image: Any,
    height: int,
    width: int,
    area_range: tuple[float, float] = (0.08, 1.0),
    *,
    seed: Any = None,
) -> tf.Tensor:
    """Crops a random area and aspect ratio of the image(s) and resizes to `height x width`.

    SimCLR's crop, on `image_ops.random_resized_crop` (torchvision's
    `RandomResizedCrop`): the crop covers a fraction of the image drawn
    from `area_range`, with a width / height ratio in
    `[3/4, 4/3] * width / height`, resized bilinearly; each image of a batch
    draws its own. 0.17 sampled with `tf.image.sample_distorted_bounding_box`,
    which also asked for 10% of the image (`min_object_covered=0.1`), so
    its smallest crops were 10% rather than 8%, and resized bicubically
    (values could leave `[0, 1]`).

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`, static `h, w`.
        height: Output height.
        width: Output width.
        area_range: Range of the crop's fraction of the image. Defaults to
            `(0.08, 1.0)`.
        seed: See `random_apply.random_apply`.

    Returns:
        Float32 image(s) `[height, width, c]`.
    """
    images, single = as_batch(image)
    aspect = width / height
    crops = image_ops.random_resized_crop(
        images,
        (height, width),
        tuple(area_range),
        (3.0 / 4.0 * aspect, 4.0 / 3.0 * aspect),
        stateless_seed(seed),
    )
    return restore(crops, single)


def crop_random_resized_crop(
    image: Any,
    height: int,
    width: int,
    min_cropsize_multiplier: float = 0.75,
    max_cropsize_multiplier: float = 1,
    *,
    seed: Any = None,
) -> tf.Tensor:
    """Crops a random square and resizes it (bilinear) to `height x width`.

    As 0.17: the square's side is an integer drawn uniformly in
    `[int(min_cropsize_multiplier * width), int(max_cropsize_multiplier *
    width))` (upper end excluded), at a uniformly random position; a
    rectangular output stretches it. Each image of a batch draws its own
    (0.17 took one image of 3 channels; any channel count works here).

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`.
        height: Output height.
        width: Output width (and the unit of the square's side).
        min_cropsize_multiplier: Smallest side as a fraction of `width`.
            Defaults to 0.75.
        max_cropsize_multiplier: Largest side (excluded) as a fraction of
            `width`. Defaults to 1.
        seed: See `random_apply.random_apply`.

    Returns:
        Float32 image(s) `[height, width, c]`.
    """
    seed = stateless_seed(seed)
    images, single = as_batch(image)
    low = int(min_cropsize_multiplier * width)
    high = max(int(max_cropsize_multiplier * width), low + 1)

    def crop_one(args: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        one, index = args
        own = sub_seed(seed, index)
        side = tf.random.stateless_uniform([], sub_seed(own, 0), low, high, dtype=tf.int32)
        size = tf.stack([side, side, tf.shape(one)[-1]])
        crop = tf.image.stateless_random_crop(one, size, sub_seed(own, 1))
        return tf.image.resize(crop, [height, width])

    indices = tf.range(tf.shape(images)[0])
    crops = tf.map_fn(
        crop_one,
        (images, indices),
        fn_output_signature=tf.TensorSpec([height, width, images.shape[-1]], tf.float32),
    )
    return restore(crops, single)


def random_resized_crop(
    image: Any,
    height: int,
    width: int,
    min_cropsize_multiplier: float = 0.75,
    max_cropsize_multiplier: float = 1,
    p: float = 1.0,
    *,
    seed: Any = None,
) -> tf.Tensor:
    """`crop_random_resized_crop` with probability `p` (one draw for all of `image`).

    0.17's square crop under this name (not `image_ops.random_resized_crop`,
    torchvision's crop, which `crop_and_resize` uses).

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`.
        height: Output height.
        width: Output width.
        min_cropsize_multiplier: See `crop_random_resized_crop`.
        max_cropsize_multiplier: See `crop_random_resized_crop`.
        p: Probability of cropping. Defaults to 1.0.
        seed: See `random_apply.random_apply`.
    """
    seed = stateless_seed(seed)

    def crop(x: Any) -> tf.Tensor:
        return crop_random_resized_crop(
            x,
            height,
            width,
            min_cropsize_multiplier,
            max_cropsize_multiplier,
            seed=sub_seed(seed, 1),
        )

    return random_apply(crop, p, image, seed=sub_seed(seed, 0))


def random_crop_with_resize(
    image: Any, height: int, width: int, p: float = 1.0, *, seed: Any = None
) -> tf.Tensor:
    """`crop_and_resize` with probability `p` (one draw for all of `image`).

    Args:
        image: One image `[h, w, c]` or a batch `[b, h, w, c]`.
        height: Output height.
        width: Output width.
        p: Probability of cropping. Defaults to 1.0.
        seed: See `random_apply.random_apply`.
    """
    seed = stateless_seed(seed)

    def crop(x: Any) -> tf.Tensor:
        return crop_and_resize(x, height, width, seed=sub_seed(seed, 1))

    return random_apply(crop, p, image, seed=sub_seed(seed, 0))
