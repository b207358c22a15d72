"""The augmenters' two ways to make views: on the batch at once, and image by image."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.augmenters import (
    _pipeline,
    barlow_augmenter,
    image_ops,
    multicrop_augmenter,
    simclr_augmenter,
)

STEP = 5
# The fused hue kernel and the batch's HSV round trip round differently.
HUE_ROUNDING = 5e-6


def views(augmenter, x, each_image):
    augmenter._each_image = each_image
    try:
        return [v.numpy() for v in augmenter(x, step=STEP)]
    finally:
        augmenter._each_image = None


def chained_image_ops(augmenter, x, size, view):
    """One view as the public `image_ops` functions make it, one after another."""
    fold = tf.random.experimental.stateless_fold_in
    call_seed = tf.constant([augmenter.seed, STEP], tf.int64)
    seed = fold(call_seed, view)
    x = tf.image.convert_image_dtype(x, tf.float32)
    x = image_ops.random_resized_crop(
        x, size, augmenter.crop_scale, augmenter.crop_ratio, fold(seed, 0)
    )
    x = image_ops.random_flip_left_right(x, augmenter.flip_prob, fold(seed, 1))
    x = image_ops.random_color_jitter(
        x,
        augmenter.brightness,
        augmenter.contrast,
        augmenter.saturation,
        augmenter.hue,
        augmenter.jitter_prob,
        fold(seed, 2),
    )
    x = image_ops.random_grayscale(x, augmenter.grayscale_prob, fold(seed, 3))
    if augmenter.blur_prob[view] > 0:
        kernel = tuple(image_ops.blur_kernel_size(s, augmenter.blur_kernel_fraction) for s in size)
        x = image_ops.random_gaussian_blur(
            x, augmenter.blur_sigma, augmenter.blur_prob[view], fold(seed, 4), kernel
        )
    if augmenter.solarize_prob[view] > 0:
        x = image_ops.random_solarize(x, augmenter.solarize_prob[view], fold(seed, 5))
    return x.numpy()


def uint8_images(batch=16, size=24, channels=3, seed=0):
    rng = np.random.default_rng(seed)
    return tf.constant(rng.integers(0, 256, (batch, size, size, channels), dtype=np.uint8))


AUGMENTERS = {
    "simclr": lambda: simclr_augmenter(16, seed=3),
    # Blur and solarisation probabilities differ between the views.
    "barlow": lambda: barlow_augmenter(16, seed=3),
    "simclr-no-hue": lambda: simclr_augmenter(16, seed=3, hue=0.0),
}


@pytest.mark.parametrize("name", sorted(AUGMENTERS))
@pytest.mark.parametrize("channels", [1, 3])
def test_batched_views_are_the_image_ops_applied_one_after_another(name, channels):
    augmenter = AUGMENTERS[name]()
    x = uint8_images(channels=channels)
    batched = views(augmenter, x, each_image=False)
    for view in (0, 1):
        expected = chained_image_ops(augmenter, x, (16, 16), view)
        np.testing.assert_allclose(batched[view], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", sorted(AUGMENTERS))
@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_image_by_image_views_equal_the_batched_views(name, dtype):
    augmenter = AUGMENTERS[name]()
    x = uint8_images()
    if dtype == "float32":
        x = tf.cast(x, tf.float32) / 255.0
    each, batched = views(augmenter, x, True), views(augmenter, x, False)
    # Without hue both compute the same formulas.
    tolerance = 1e-6 if augmenter.hue == 0 else HUE_ROUNDING
    for a, b in zip(each, batched, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=tolerance)
    # The views are not trivially equal: the two views of an image differ.
    assert np.abs(each[0] - each[1]).max() > 0.1


@pytest.mark.parametrize("channels", [1, 3])
def test_multicrop_image_by_image_views_equal_the_batched_views(channels):
    augmenter = multicrop_augmenter(16, 8, n_local=3, seed=2)
    x = uint8_images(batch=6, channels=channels)
    each, batched = views(augmenter, x, True), views(augmenter, x, False)
    assert each[0].shape == (6, 2, 16, 16, channels) and each[1].shape == (6, 3, 8, 8, channels)
    for a, b in zip(each, batched, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=HUE_ROUNDING)


@pytest.mark.parametrize(
    ("size", "each_image"),
    [(40, True), (48, True), (39, False), (16, False)],
)
def test_on_a_cpu_views_from_40_x_40_pixels_are_made_image_by_image(size, each_image):
    assert (size * size >= _pipeline.EACH_IMAGE_MIN_PIXELS) == each_image
    augmenter = simclr_augmenter(size, seed=3)
    x = uint8_images(batch=4, size=size)
    expected = views(augmenter, x, each_image)
    assert not np.array_equal(expected[0], views(augmenter, x, not each_image)[0])
    graph = tf.function(lambda images: augmenter(images, step=STEP))
    dataset = tf.data.Dataset.from_tensors(x).map(lambda images: augmenter(images, step=STEP))
    # Eagerly, in a graph and in a tf.data pipeline alike.
    for made in (augmenter(x, step=STEP), graph(x), next(iter(dataset))):
        for a, b in zip(made, expected, strict=True):
            np.testing.assert_array_equal(a, b)
    with tf.device("/CPU:0"):
        assert not _pipeline.on_accelerator(tf.constant(x))
