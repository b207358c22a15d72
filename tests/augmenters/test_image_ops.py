"""The per-image random transforms against NumPy references and their probabilities."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.augmenters import image_ops, view_draws

SEED = tf.constant([7, 11], tf.int64)
# 4000 draws: the binomial standard deviation of a fraction is at most 0.008,
# so 0.04 is five sigmas; the seeds are fixed, so the tests are deterministic.
NUM_DRAWS = 4000
TOLERANCE = 0.04


def ramp_images(batch: int, height: int, width: int) -> tf.Tensor:
    """Channel 0 is the x coordinate of each pixel centre / width, channel 1 the y one."""
    xs = (np.arange(width) + 0.5) / width
    ys = (np.arange(height) + 0.5) / height
    x, y = np.meshgrid(xs, ys)
    image = np.stack([x, y, np.zeros_like(x)], axis=-1).astype("float32")
    return tf.constant(np.broadcast_to(image, (batch, height, width, 3)))


@pytest.mark.parametrize("in_size, out_size", [((40, 40), (32, 32)), ((8, 8), (32, 32))])
def test_whole_image_crop_equals_bilinear_resize(in_size, out_size):
    images = tf.random.stateless_uniform((3, *in_size, 3), seed=(1, 2))
    crop = image_ops.random_resized_crop(images, out_size, (1.0, 1.0), (1.0, 1.0), SEED)
    np.testing.assert_allclose(crop, tf.image.resize(images, out_size), atol=1e-5)


@pytest.mark.parametrize("scale", [0.25, 0.5])
def test_crop_has_the_requested_area_and_lies_inside_the_image(scale):
    width = 20
    out = 10
    images = ramp_images(200, width, width)
    crop = image_ops.random_resized_crop(images, (out, out), (scale, scale), (1.0, 1.0), SEED)
    crop = crop.numpy()
    # A bilinear sample of a linear ramp is exact: the crop's width follows from
    # the ramp's rise across the output, its left edge from the first sample.
    step = (crop[:, 0, -1, 0] - crop[:, 0, 0, 0]) / (out - 1)
    crop_width = step * out * width
    np.testing.assert_allclose(crop_width, np.sqrt(scale) * width, rtol=1e-4)
    left = crop[:, 0, 0, 0] - step / 2
    top = crop[:, 0, 0, 1] - step / 2
    assert left.min() >= -1e-5 and (left + step * out).max() <= 1 + 1e-5
    assert top.min() >= -1e-5 and (top + step * out).max() <= 1 + 1e-5
    # Positions are spread over the allowed range, not fixed.
    assert np.ptp(left) > 0.5 * (1 - np.sqrt(scale))


def test_crop_falls_back_to_central_crop_when_no_draw_fits():
    # A whole-image area at aspect ratio 2 never fits a square image: the
    # fallback is the central full-width crop of height width / 2.
    images = ramp_images(4, 16, 16)
    crop = image_ops.random_resized_crop(images, (8, 16), (1.0, 1.0), (2.0, 2.0), SEED).numpy()
    np.testing.assert_allclose(crop[:, 0, 0, 1], 0.25 + 0.5 / 16, atol=1e-5)
    np.testing.assert_allclose(crop[:, -1, 0, 1], 0.75 - 0.5 / 16, atol=1e-5)
    np.testing.assert_allclose(crop[:, 0, 0, 0], 0.5 / 16, atol=1e-5)


def numpy_blur(images: np.ndarray, sigma: float, size: int) -> np.ndarray:
    radius = size // 2
    offsets = np.arange(-radius, radius + 1)
    kernel = np.exp(-(offsets**2) / (2 * sigma**2))
    kernel /= kernel.sum()
    out = images.astype("float64")
    for axis in (1, 2):
        pad = [(0, 0)] * 4
        pad[axis] = (radius, radius)
        padded = np.pad(out, pad, mode="reflect")
        out = sum(
            w * np.take(padded, np.arange(i, i + images.shape[axis]), axis=axis)
            for i, w in enumerate(kernel)
        )
    return out


@pytest.mark.parametrize("sigma, size", [(0.7, 3), (1.5, 5)])
def test_gaussian_blur_matches_numpy(sigma, size):
    images = tf.random.stateless_uniform((2, 12, 10, 3), seed=(3, 4))
    blurred = image_ops.random_gaussian_blur(images, (sigma, sigma), 1.0, SEED, (size, size))
    np.testing.assert_allclose(blurred, numpy_blur(images.numpy(), sigma, size), atol=1e-5)


def test_blur_output_stays_in_unit_range():
    # Bright images: weights that sum to one can round a blurred 1 to 1.0000001.
    images = 1.0 - 0.05 * tf.random.stateless_uniform((256, 24, 24, 3), seed=(8, 9))
    images = tf.where(images > 0.99, 1.0, images)
    out = image_ops.random_gaussian_blur(images, (0.1, 2.0), 1.0, SEED, (5, 5))
    assert float(tf.reduce_min(out)) >= 0.0 and float(tf.reduce_max(out)) <= 1.0


def test_blur_accepts_an_unknown_batch_size():
    blur = tf.function(
        lambda x: image_ops.random_gaussian_blur(x, (1.0, 1.0), 1.0, SEED, (3, 3)),
        input_signature=[tf.TensorSpec([None, 6, 5, 3], tf.float32)],
    )
    images = tf.random.stateless_uniform((2, 6, 5, 3), seed=(3, 4))
    np.testing.assert_allclose(blur(images), numpy_blur(images.numpy(), 1.0, 3), atol=1e-5)


@pytest.mark.parametrize("length, expected", [(224, 23), (96, 9), (32, 3), (8, 3), (2, 3), (1, 1)])
def test_blur_kernel_size_is_ten_percent_and_odd(length, expected):
    assert image_ops.blur_kernel_size(length) == expected


def fraction_changed(before: tf.Tensor, after: tf.Tensor) -> float:
    changed = tf.reduce_any(tf.abs(after - before) > 1e-6, axis=[1, 2, 3])
    return float(tf.reduce_mean(tf.cast(changed, tf.float32)))


@pytest.mark.parametrize("probability", [0.1, 0.5])
def test_flip_probability(probability):
    images = ramp_images(NUM_DRAWS, 2, 2)
    flipped = image_ops.random_flip_left_right(images, probability, SEED)
    assert abs(fraction_changed(images, flipped) - probability) < TOLERANCE
    np.testing.assert_array_equal(tf.reduce_sum(flipped, [1, 2]), tf.reduce_sum(images, [1, 2]))


@pytest.mark.parametrize("probability", [0.2, 0.8])
def test_grayscale_probability_and_luma(probability):
    images = tf.random.stateless_uniform((NUM_DRAWS, 2, 2, 3), seed=(5, 6))
    out = image_ops.random_grayscale(images, probability, SEED)
    assert abs(fraction_changed(images, out) - probability) < TOLERANCE
    converted = tf.reduce_any(tf.abs(out - images) > 0, axis=[1, 2, 3]).numpy()
    luma = images.numpy() @ np.array([0.299, 0.587, 0.114])
    np.testing.assert_allclose(
        out.numpy()[converted], np.repeat(luma[converted, ..., None], 3, -1), atol=1e-6
    )


@pytest.mark.parametrize("probability", [0.1, 0.5, 1.0])
def test_blur_probability(probability):
    images = tf.random.stateless_uniform((NUM_DRAWS, 4, 4, 1), seed=(5, 6))
    out = image_ops.random_gaussian_blur(images, (1.0, 2.0), probability, SEED, (3, 3))
    assert abs(fraction_changed(images, out) - probability) < TOLERANCE


@pytest.mark.parametrize("probability", [0.0, 0.2])
def test_solarize_probability_and_threshold(probability):
    images = tf.constant(np.tile([0.2, 0.5, 0.8], (NUM_DRAWS, 1, 1, 1)).astype("float32"))
    images = tf.reshape(images, (NUM_DRAWS, 1, 3, 1))
    out = image_ops.random_solarize(images, probability, SEED).numpy()
    solarized = np.any(out != images.numpy(), axis=(1, 2, 3))
    assert abs(solarized.mean() - probability) < TOLERANCE
    np.testing.assert_allclose(
        out[solarized, 0, :, 0], np.tile([0.2, 0.5, 0.2], (solarized.sum(), 1))
    )


def test_color_jitter_probability_and_brightness_factor_range():
    images = tf.fill((NUM_DRAWS, 2, 2, 3), 0.5)
    out = image_ops.random_color_jitter(images, 0.4, 0.0, 0.0, 0.0, 0.8, SEED)
    assert abs(fraction_changed(images, out) - 0.8) < TOLERANCE
    factor = out.numpy()[:, 0, 0, 0] / 0.5
    np.testing.assert_allclose(out.numpy(), (0.5 * factor)[:, None, None, None] + 0 * out.numpy())
    assert factor.min() >= 0.6 - 1e-6 and factor.max() <= 1.4 + 1e-6
    assert factor.min() < 0.65 and factor.max() > 1.35


def test_color_jitter_output_stays_in_unit_range_and_keeps_grey_images_grey():
    images = tf.random.stateless_uniform((64, 6, 6, 3), seed=(1, 1))
    out = image_ops.random_color_jitter(images, 0.8, 0.8, 0.8, 0.2, 1.0, SEED)
    assert float(tf.reduce_min(out)) >= 0.0 and float(tf.reduce_max(out)) <= 1.0
    grey = tf.tile(images[..., :1], [1, 1, 1, 3])
    out_grey = image_ops.random_color_jitter(grey, 0.8, 0.8, 0.8, 0.2, 1.0, SEED)
    one_channel = image_ops.random_color_jitter(images[..., :1], 0.8, 0.8, 0.8, 0.2, 1.0, SEED)
    # Saturation and hue cannot change a grey image, so the RGB and 1-channel paths agree.
    np.testing.assert_allclose(out_grey, tf.tile(one_channel, [1, 1, 1, 3]), atol=1e-5)


def test_color_jitter_hue_shift_is_a_rotation_of_hsv_hue():
    images = tf.random.stateless_uniform((256, 3, 3, 3), seed=(2, 2))
    out = image_ops.random_color_jitter(images, 0.0, 0.0, 0.0, 0.1, 1.0, SEED)
    before, after = tf.image.rgb_to_hsv(images).numpy(), tf.image.rgb_to_hsv(out).numpy()
    np.testing.assert_allclose(after[..., 1:], before[..., 1:], atol=1e-4)
    shift = (after[..., 0] - before[..., 0] + 0.5) % 1.0 - 0.5
    # One shift per image, within [-0.1, 0.1].
    np.testing.assert_allclose(shift, shift[:, :1, :1] + 0 * shift, atol=1e-3)
    assert np.abs(shift).max() <= 0.1 + 1e-3 and np.abs(shift).max() > 0.09


def numpy_color_jitter(image, factors, hue_shift, order):
    """One image's jitter, one operation after another in its order, in float64."""
    out = image.astype("float64")
    for operation in order:
        luma = out @ np.array([0.299, 0.587, 0.114])
        if operation == 3:
            hsv = np.array([colorsys.rgb_to_hsv(*pixel) for pixel in out.reshape(-1, 3)])
            hsv[:, 0] = (hsv[:, 0] + hue_shift) % 1.0
            out = np.array([colorsys.hsv_to_rgb(*pixel) for pixel in hsv]).reshape(out.shape)
        else:
            target = (0.0, luma.mean(), luma[..., None])[operation]
            out = factors[operation] * out + (1 - factors[operation]) * target
        out = np.clip(out, 0.0, 1.0)
    return out


def test_color_jitter_applies_each_images_operations_in_its_own_order():
    images = tf.random.stateless_uniform((64, 4, 4, 3), seed=(4, 4))
    out = image_ops.random_color_jitter(images, 0.8, 0.8, 0.8, 0.2, 0.75, SEED).numpy()
    # The draws, as the function makes them.
    sub_seed = view_draws._sub_seed
    factors = np.stack(
        [view_draws._uniform(sub_seed(SEED, i), 64, 0.2, 1.8).numpy() for i in range(3)],
        axis=1,
    )
    hue_shift = view_draws._uniform(sub_seed(SEED, 3), 64, -0.2, 0.2).numpy()
    apply = view_draws.bernoulli_mask(64, 0.75, sub_seed(SEED, 4)).numpy()
    order = np.argsort(view_draws._uniform(sub_seed(SEED, 5), 64, 0.0, 1.0, (4,)).numpy(), axis=1)
    assert 0 < apply.sum() < 64 and len({tuple(o) for o in order[apply]}) > 10
    for i in range(64):
        expected = images.numpy()[i]
        if apply[i]:
            expected = numpy_color_jitter(expected, factors[i], hue_shift[i], order[i])
        np.testing.assert_allclose(out[i], expected, atol=1e-5, err_msg=f"image {i}")
