"""0.17's `augmenters.augmentation_utils` functions: signatures, shapes, ranges, seeding."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.augmenters.augmentation_utils import (
    blur,
    color_jitter,
    cropping,
    flip,
    random_apply,
    solarize,
)

# 0.17.1's parameters of each function, in order, with their defaults.
SIGNATURES_017 = {
    blur.random_blur: (
        "image, height, width, p=1.0, min_sigma=0.1, max_sigma=2.0, kernel_size_divider=10"
    ),
    blur.batch_random_blur: "images_list, height, width, blur_probability=0.5",
    blur.gaussian_blur: "image, kernel_size, sigma, padding='SAME'",
    color_jitter.color_jitter: (
        "image, strength=1.0, brightness_multiplier=0.8, contrast_multiplier=0.8, "
        "saturation_multiplier=0.8, hue_multiplier=0.2, random_order=True, "
        "impl='multiplicative'"
    ),
    color_jitter.color_jitter_nonrand: (
        "image, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0, impl='multiplicative'"
    ),
    color_jitter.color_jitter_rand: (
        "image, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0, impl='multiplicative'"
    ),
    color_jitter.to_grayscale: "image, keep_channels=True",
    color_jitter.random_brightness: "image, max_delta, impl='multiplicative'",
    color_jitter.random_color_jitter: (
        "image, p_execute=1.0, p_jitter=0.8, brightness_multiplier=0.8, "
        "contrast_multiplier=0.8, saturation_multiplier=0.8, hue_multiplier=0.2, p_grey=0.2, "
        "strength=1.0, impl='multiplicative'"
    ),
    cropping.center_crop: "image, height, width, crop_proportion",
    cropping.distorted_bounding_box_crop: (
        "image, bbox, min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33), "
        "area_range=(0.05, 1.0), max_attempts=100, scope=None"
    ),
    cropping.crop_and_resize: "image, height, width, area_range=(0.08, 1.0)",
    cropping.crop_random_resized_crop: (
        "image, height, width, min_cropsize_multiplier=0.75, max_cropsize_multiplier=1"
    ),
    cropping.random_resized_crop: (
        "image, height, width, min_cropsize_multiplier=0.75, max_cropsize_multiplier=1, p=1.0"
    ),
    cropping.random_crop_with_resize: "image, height, width, p=1.0",
    flip.random_random_flip_left_right: "image, p=0.5",
    flip.random_random_flip_top_bottom: "image, p=0.5",
    random_apply.random_apply: "func, p, x",
    solarize.random_solarize: "image, p=0.2, pixel_min=0, pixel_max=255, thresh=10",
}


def _positional_part(function) -> str:
    parts = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY:
            continue
        default = parameter.default
        parts.append(
            parameter.name if default is parameter.empty else f"{parameter.name}={default!r}"
        )
    return ", ".join(parts)


def test_all_19_functions_keep_017_parameters():
    assert len(SIGNATURES_017) == 19
    for function, expected in SIGNATURES_017.items():
        assert _positional_part(function) == expected, function.__name__
        keyword_only = [
            p.name
            for p in inspect.signature(function).parameters.values()
            if p.kind is p.KEYWORD_ONLY
        ]
        assert keyword_only in ([], ["seed"]), function.__name__


def _image(seed=0, size=(32, 32, 3)):
    return np.random.default_rng(seed).random(size).astype(np.float32)


# Each random function, called with seed=..., on a [0, 1] image: (call, output shape).
SEEDED = {
    "random_blur": (lambda x, s: blur.random_blur(x, 32, 32, p=1.0, seed=s), (32, 32, 3)),
    "batch_random_blur": (
        lambda x, s: blur.batch_random_blur([x[None], x[None]], 32, 32, 1.0, seed=s)[1][0],
        (32, 32, 3),
    ),
    "color_jitter": (lambda x, s: color_jitter.color_jitter(x, seed=s), (32, 32, 3)),
    "color_jitter_nonrand": (
        lambda x, s: color_jitter.color_jitter_nonrand(x, 0.4, 0.4, 0.4, 0.1, seed=s),
        (32, 32, 3),
    ),
    "color_jitter_rand": (
        lambda x, s: color_jitter.color_jitter_rand(x, 0.4, 0.4, 0.4, 0.1, seed=s),
        (32, 32, 3),
    ),
    "random_brightness": (
        lambda x, s: color_jitter.random_brightness(x, 0.5, seed=s),
        (32, 32, 3),
    ),
    "random_color_jitter": (
        lambda x, s: color_jitter.random_color_jitter(x, p_jitter=1.0, seed=s),
        (32, 32, 3),
    ),
    "distorted_bounding_box_crop": (
        lambda x, s: cropping.distorted_bounding_box_crop(
            x, tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), seed=s
        ),
        None,
    ),
    "crop_and_resize": (lambda x, s: cropping.crop_and_resize(x, 24, 16, seed=s), (24, 16, 3)),
    "crop_random_resized_crop": (
        lambda x, s: cropping.crop_random_resized_crop(x, 20, 20, seed=s),
        (20, 20, 3),
    ),
    "random_resized_crop": (
        lambda x, s: cropping.random_resized_crop(x, 20, 20, seed=s),
        (20, 20, 3),
    ),
    "random_crop_with_resize": (
        lambda x, s: cropping.random_crop_with_resize(x, 16, 16, seed=s),
        (16, 16, 3),
    ),
    "flip_left_right": (
        lambda x, s: flip.random_random_flip_left_right(x, p=1.0, seed=s),
        (32, 32, 3),
    ),
    "flip_top_bottom": (
        lambda x, s: flip.random_random_flip_top_bottom(x, p=1.0, seed=s),
        (32, 32, 3),
    ),
    "random_apply": (
        lambda x, s: random_apply.random_apply(lambda y: 1.0 - y, 0.5, tf.constant(x), seed=s),
        (32, 32, 3),
    ),
    "random_solarize": (
        lambda x, s: solarize.random_solarize(x, 0.5, pixel_max=1, thresh=0.5, seed=s),
        (32, 32, 3),
    ),
}


@pytest.mark.parametrize("name", sorted(SEEDED))
def test_seeded_calls_repeat_and_stay_in_range(name):
    call, shape = SEEDED[name]
    x = _image()
    # Lightens the image for random_brightness's unclipped factor of at most 1.5.
    x = x * 0.6 if name == "random_brightness" else x

    first = call(x, 7).numpy()
    again = call(x, tf.constant([7, 0])).numpy()
    others = [call(x, seed).numpy() for seed in range(8, 16)]

    np.testing.assert_array_equal(first, again)
    assert first.dtype == np.float32
    if shape is not None:
        assert first.shape == shape
    else:
        assert first.ndim == 3 and first.shape[-1] == 3
    assert first.min() >= -1e-6 and first.max() <= 1.0 + 1e-6
    # Some other seed draws another result.
    assert any(o.shape != first.shape or not np.array_equal(o, first) for o in others)


@pytest.mark.parametrize("name", ["crop_and_resize", "color_jitter_rand", "random_blur"])
def test_unseeded_calls_repeat_after_tf_random_set_seed(name):
    call, _ = SEEDED[name]
    x = _image(1)

    tf.random.set_seed(3)
    first = call(x, None).numpy()
    tf.random.set_seed(3)
    again = call(x, None).numpy()

    np.testing.assert_array_equal(first, again)


def test_batches_draw_per_image():
    batch = np.repeat(_image(2)[None], 8, axis=0)

    crops = cropping.crop_and_resize(batch, 16, 16, seed=1).numpy()
    jittered = color_jitter.color_jitter_rand(batch, 0.4, 0.4, 0.4, 0.1, seed=1).numpy()

    assert crops.shape == (8, 16, 16, 3) and jittered.shape == (8, 32, 32, 3)
    assert len({c.tobytes() for c in crops}) == 8
    assert len({j.tobytes() for j in jittered}) == 8


def test_flip_mirrors_with_probability_half_of_p():
    x = _image(3)
    batch = np.repeat(x[None], 400, axis=0)

    out = flip.random_random_flip_left_right(batch, p=1.0, seed=2).numpy()

    flipped = np.array([np.array_equal(o, x[:, ::-1]) for o in out])
    unchanged = np.array([np.array_equal(o, x) for o in out])
    assert np.all(flipped ^ unchanged)
    assert 0.4 < flipped.mean() < 0.6
    np.testing.assert_array_equal(flip.random_random_flip_left_right(batch, p=0.0).numpy(), batch)


def test_random_apply_applies_with_probability_p():
    applied = [
        float(random_apply.random_apply(lambda v: v + 1.0, 0.3, tf.zeros([]), seed=s))
        for s in range(300)
    ]

    assert 0.22 < np.mean(applied) < 0.38


def test_solarize_inverts_at_or_above_the_threshold():
    values = tf.constant([0.0, 9.0, 10.0, 200.0, 255.0])

    out = solarize.random_solarize(values, p=1.0, seed=0).numpy()

    np.testing.assert_array_equal(out, [0.0, 9.0, 245.0, 55.0, 0.0])


def test_gaussian_blur_is_a_normalised_gaussian():
    image = np.zeros((9, 9, 2), np.float32)
    image[4, 4] = 1.0

    same = blur.gaussian_blur(image, 4, sigma=1.0).numpy()
    valid = blur.gaussian_blur(image[None], 3, sigma=1.0, padding="VALID").numpy()

    weights = np.exp(-(np.arange(-2, 3) ** 2) / 2.0)
    weights /= weights.sum()
    np.testing.assert_allclose(same[2:7, 2:7, 0], np.outer(weights, weights), rtol=1e-5)
    assert same.shape == (9, 9, 2) and valid.shape == (1, 7, 7, 2)


def test_to_grayscale_and_brightness():
    x = _image(4)

    grey = color_jitter.to_grayscale(x).numpy()
    single = color_jitter.to_grayscale(x, keep_channels=False).numpy()
    brighter = color_jitter.random_brightness(x, 0.5, seed=1).numpy()
    shifted = color_jitter.random_brightness(x, 0.2, impl="additive", seed=1).numpy()

    luma = x @ np.array([0.299, 0.587, 0.114], np.float32)
    np.testing.assert_allclose(single[..., 0], luma, rtol=1e-5)
    np.testing.assert_allclose(grey, np.repeat(single, 3, axis=-1))
    factor = brighter / x
    assert np.allclose(factor, factor.flat[0]) and 0.5 <= factor.flat[0] <= 1.5
    delta = shifted - x
    assert np.allclose(delta, delta.flat[0], atol=1e-6) and abs(delta.flat[0]) <= 0.2
    with pytest.raises(ValueError, match="multiplicative"):
        color_jitter.color_jitter_rand(x, 0.4, impl="additive")


def test_center_crop_keeps_the_output_aspect_ratio():
    x = np.arange(100 * 100, dtype=np.float32).reshape(100, 100, 1) / 1e4

    square = cropping.center_crop(x, 50, 50, 0.5).numpy()
    with pytest.warns(UserWarning, match="inverse"):
        wide = cropping.center_crop(x, 32, 64, 0.875)

    # A 50x50 crop of the centre resized to 50x50 is the crop itself.
    np.testing.assert_allclose(square[..., 0], x[25:75, 25:75, 0], atol=1e-5)
    assert wide.shape == (32, 64, 1)


def test_distorted_bounding_box_crop_is_a_window_of_the_image():
    x = _image(5, (20, 30, 3))

    crop = cropping.distorted_bounding_box_crop(
        x, tf.constant([[[0.0, 0.0, 1.0, 1.0]]]), area_range=(0.2, 0.5), seed=4
    ).numpy()

    h, w, _ = crop.shape
    assert 0.2 * 600 <= h * w <= 0.5 * 600 + 30
    windows = [
        (top, left)
        for top in range(20 - h + 1)
        for left in range(30 - w + 1)
        if np.array_equal(x[top : top + h, left : left + w], crop)
    ]
    assert len(windows) == 1


def test_the_017_unsupervised_notebook_augmenter_runs_in_a_dataset_map():
    # 0.17's `simsiam_augmenter` (blur off, as the notebook runs it) on uint8 CIFAR images.
    @tf.function
    def simsiam_augmenter(img):
        img = cropping.crop_and_resize(img, 32, 32, area_range=(0.2, 1.0))
        img /= 255.0
        img = random_apply.random_apply(
            lambda x: color_jitter.color_jitter_rand(x, 0.3, 0.3, 0.3, 0.05, "multiplicative"),
            p=0.8,
            x=img,
        )
        img = random_apply.random_apply(color_jitter.to_grayscale, p=0.2, x=img)
        img = tf.image.random_flip_left_right(img)
        return tf.clip_by_value(img * 255.0, 0.0, 255.0)

    # Without a global seed: with one, TensorFlow gives the stateful random ops of both
    # calls of a traced function the same seeds (and 0.17's views were equal too).
    tf.random.set_seed(None)
    images = np.random.default_rng(6).integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    dataset = tf.data.Dataset.from_tensor_slices(images).map(
        lambda img: (simsiam_augmenter(img), simsiam_augmenter(img))
    )

    view1, view2 = next(iter(dataset.batch(4)))

    assert view1.shape == view2.shape == (4, 32, 32, 3)
    assert float(tf.reduce_min(view1)) >= 0.0 and float(tf.reduce_max(view1)) <= 255.0
    assert not np.array_equal(view1.numpy(), view2.numpy())


def test_batch_random_blur_keeps_each_items_shape_as_0_17():
    # 0.17's own test passes a list of single images: each comes back as it went in.
    image = tf.random.stateless_uniform((32, 32, 3), seed=[0, 1])
    batch = tf.stack([image, 1.0 - image])

    single_out, batch_out = blur.batch_random_blur([image, batch], 32, 32, 1.0, seed=3)
    unblurred, _ = blur.batch_random_blur([image, batch], 32, 32, 0.0, seed=3)

    assert single_out.shape == image.shape and batch_out.shape == batch.shape
    assert not np.allclose(single_out.numpy(), image.numpy())
    np.testing.assert_array_equal(unblurred.numpy(), image.numpy())
