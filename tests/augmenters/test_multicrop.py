"""MultiCropAugmenter and its DINO preset: shapes, seeding, crop areas, flips, config, errors."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.augmenters import MultiCropAugmenter, multicrop_augmenter

# Only the crops: no flip, colour, blur or solarisation.
CROPS_ONLY = dict(
    flip_prob=0.0,
    jitter_prob=0.0,
    grayscale_prob=0.0,
    global_blur_prob=0.0,
    local_blur_prob=0.0,
    global_solarize_prob=0.0,
)
# Crops of the whole image: a view is the image resized.
WHOLE = dict(global_crop_scale=(1.0, 1.0), local_crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0))


def images(batch=4, size=24, channels=3, seed=0):
    return tf.random.stateless_uniform((batch, size, size, channels), seed=(seed, 1))


def ramp(batch, size):
    """Channel 0 the column, channel 1 the row, each from 0 to 1: a view shows its crop box."""
    line = np.linspace(0.0, 1.0, size, dtype=np.float32)
    columns, rows = np.meshgrid(line, line)
    image = np.stack([columns, rows, np.full_like(rows, 0.5)], axis=-1)
    return tf.constant(np.repeat(image[None], batch, axis=0))


def all_views(global_views, local_views):
    return [global_views[:, 0], global_views[:, 1], *tf.unstack(local_views, axis=1)]


def assert_all_equal(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def differ(a, b):
    return not np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("n_local", [0, 3])
@pytest.mark.parametrize("channels", [1, 3])
def test_output_shapes_dtypes_and_range(n_local, channels):
    # Bright images, many at exactly 1, all blurred: where rounding could leave [0, 1].
    x = tf.minimum(1.0, 1.02 - 0.1 * images(channels=channels))
    augmenter = MultiCropAugmenter(16, 8, n_local=n_local, local_blur_prob=1.0, seed=0)
    global_views, local_views = augmenter(x)
    assert global_views.shape == (4, 2, 16, 16, channels)
    assert local_views.shape == (4, n_local, 8, 8, channels)
    for views in (global_views, local_views):
        assert views.dtype == tf.float32
        assert np.all((views.numpy() >= 0.0) & (views.numpy() <= 1.0))


def test_rectangular_sizes_one_image_and_uint8():
    augmenter = MultiCropAugmenter((16, 12), (8, 6), n_local=2, seed=0)
    x = images(batch=1)[0]
    global_views, local_views = augmenter(x, step=4)
    assert global_views.shape == (2, 16, 12, 3) and local_views.shape == (2, 8, 6, 3)
    as_uint8 = tf.cast(tf.round(x * 255), tf.uint8)
    expected = augmenter(tf.cast(as_uint8, tf.float32) / 255.0, step=4)
    for a, b in zip(augmenter(as_uint8, step=4), expected, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_same_seed_same_views_different_seed_or_call_different_views():
    x = images()
    first, second = MultiCropAugmenter(16, 8, 2, seed=3), MultiCropAugmenter(16, 8, 2, seed=3)
    calls = [first(x) for _ in range(2)]
    for views, again in zip(calls, [second(x) for _ in range(2)], strict=True):
        assert_all_equal(views, again)
    assert differ(calls[0][0], calls[1][0]) and differ(calls[0][1], calls[1][1])
    assert differ(MultiCropAugmenter(16, 8, 2, seed=4)(x)[0], calls[0][0])
    views = all_views(*calls[0])
    assert all(differ(views[i], views[j]) for i in range(4) for j in range(i))


def test_step_makes_views_a_function_of_seed_and_step_eagerly_and_in_tf_function():
    x = images()
    augmenter = MultiCropAugmenter(16, 8, 2, seed=5)
    eager = augmenter(x, step=7)
    assert_all_equal(eager, MultiCropAugmenter(16, 8, 2, seed=5)(x, step=7))
    assert differ(eager[0], augmenter(x, step=8)[0])
    traced = tf.function(lambda batch, step: augmenter(batch, step=step))
    # Graph kernels may round differently from eager ones in the last bits.
    for a, b in zip(traced(x, tf.constant(7, tf.int64)), eager, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_no_local_views_keep_a_static_shape_in_graphs():
    augmenter = MultiCropAugmenter(16, 8, n_local=0, seed=0)
    traced = tf.function(augmenter, input_signature=[tf.TensorSpec((None, 24, 24, 3))])
    global_spec, local_spec = traced.get_concrete_function().structured_outputs
    assert global_spec.shape.as_list() == [None, 2, 16, 16, 3]
    assert local_spec.shape.as_list() == [None, 0, 8, 8, 3]


def test_global_views_do_not_depend_on_the_number_of_local_views():
    x = images()
    alone, _ = MultiCropAugmenter(16, 8, n_local=0, seed=2)(x, step=1)
    with_locals, _ = MultiCropAugmenter(16, 8, n_local=3, seed=2)(x, step=1)
    np.testing.assert_array_equal(alone, with_locals)


def test_crop_areas_and_aspect_ratios_lie_within_their_ranges():
    # A view of a crop w pixels wide spans w * (1 - 1 / out_w) columns of the ramp:
    # its first and last pixel centres lie half an output pixel inside the crop.
    # The crops here are all larger than the views, so no sample is clamped at an edge.
    size = 64
    augmenter = MultiCropAugmenter(16, 8, n_local=4, **CROPS_ONLY, seed=0)
    global_views, local_views = augmenter(ramp(64, size))

    def boxes(views):
        out = views.shape[-2]
        extent = tf.reduce_max(views, axis=[-3, -2]) - tf.reduce_min(views, axis=[-3, -2])
        sides = extent.numpy()[..., :2] * (size - 1) / (1 - 1 / out)
        area = sides[..., 0] * sides[..., 1] / size**2
        return area, sides[..., 0] / sides[..., 1]

    quantiles = []
    for views, (low, high) in ((global_views, (0.4, 1.0)), (local_views, (0.05, 0.4))):
        area, ratio = boxes(views)
        quantiles += list(((area - low) / (high - low)).T)
        area, ratio = area.ravel(), ratio.ravel()
        assert np.all((area >= low - 1e-3) & (area <= high + 1e-3)), (area.min(), area.max())
        # The whole range is drawn from, not a corner of it.
        assert area.min() < low + 0.1 * (high - low) and area.max() > high - 0.2 * (high - low)
        assert np.all((ratio >= 3 / 4 - 1e-3) & (ratio <= 4 / 3 + 1e-3))
    # Each view draws its own crops: the areas of two views of 64 images are uncorrelated
    # (|r| < 0.5 is four standard deviations), not the same draws scaled to two ranges.
    correlation = np.corrcoef(np.stack(quantiles))
    assert np.all(np.abs(correlation[np.triu_indices(len(quantiles), 1)]) < 0.5)


@pytest.mark.parametrize("flip_prob, increasing", [(0.0, True), (1.0, False)])
def test_views_are_flipped_only_when_flips_are_on(flip_prob, increasing):
    augmenter = MultiCropAugmenter(16, 8, 2, **{**CROPS_ONLY, **WHOLE, "flip_prob": flip_prob})
    for view in all_views(*augmenter(ramp(8, 24))):
        steps = np.diff(view.numpy()[..., 0], axis=-1)
        assert np.all(steps > 0) if increasing else np.all(steps < 0)


def test_without_flips_and_colour_views_of_whole_crops_are_the_resized_images():
    x = images(batch=32)
    augmenter = multicrop_augmenter(
        16, 8, 2, flip=False, color=False, global_blur_prob=0.0, local_blur_prob=0.0, **WHOLE
    )
    global_views, local_views = augmenter(x)
    for view in (global_views[:, 0], global_views[:, 1]):
        np.testing.assert_allclose(view, tf.image.resize(x, (16, 16)), atol=1e-5)
    for view in tf.unstack(local_views, axis=1):
        np.testing.assert_allclose(view, tf.image.resize(x, (8, 8)), atol=1e-5)


def test_blur_and_solarisation_probabilities_by_view():
    # Whole crops at the input size leave each image as it is; a view then differs
    # from its image exactly when it was blurred (sigma >= 1 to be visible) or solarised.
    x = tf.constant(np.random.default_rng(0).uniform(size=(1000, 8, 8, 1)), tf.float32)
    fractions = {}
    for transform, settings in (
        ("blur", dict(blur_sigma=(1.0, 2.0), global_blur_prob=(1.0, 0.1), local_blur_prob=0.5)),
        ("solarize", dict(global_solarize_prob=(0.0, 0.2), local_solarize_prob=0.3)),
    ):
        augmenter = MultiCropAugmenter(8, 8, 2, **{**CROPS_ONLY, **WHOLE, **settings}, seed=0)
        fractions[transform] = [
            float(np.mean(np.any(np.abs(view.numpy() - x.numpy()) > 1e-4, axis=(1, 2, 3))))
            for view in all_views(*augmenter(x))
        ]
    np.testing.assert_allclose(fractions["blur"], [1.0, 0.1, 0.5, 0.5], atol=0.05)
    np.testing.assert_allclose(fractions["solarize"], [0.0, 0.2, 0.3, 0.3], atol=0.05)


def test_preset_is_dino_and_the_class_defaults():
    config = multicrop_augmenter().get_config()
    assert config == MultiCropAugmenter().get_config()
    assert config["global_size"] == [224, 224] and config["local_size"] == [96, 96]
    assert config["n_local"] == 8
    assert config["global_crop_scale"] == [0.4, 1.0] and config["local_crop_scale"] == [0.05, 0.4]
    assert config["flip_prob"] == 0.5 and config["jitter_prob"] == 0.8
    jitter = [config[key] for key in ("brightness", "contrast", "saturation", "hue")]
    assert jitter == pytest.approx([0.4, 0.4, 0.2, 0.1])
    assert config["grayscale_prob"] == 0.2 and config["blur_sigma"] == [0.1, 2.0]
    assert config["global_blur_prob"] == [1.0, 0.1] and config["local_blur_prob"] == 0.5
    assert config["global_solarize_prob"] == [0.0, 0.2] and config["local_solarize_prob"] == 0.0

    plain = multicrop_augmenter(32, 16, 6, flip=False, color=False).get_config()
    assert plain["global_size"] == [32, 32] and plain["n_local"] == 6
    assert plain["flip_prob"] == 0.0 and plain["jitter_prob"] == 0.0
    assert plain["grayscale_prob"] == 0.0 and plain["global_solarize_prob"] == [0.0, 0.0]
    assert plain["global_blur_prob"] == [1.0, 0.1]


def test_config_and_serialization_round_trips_give_the_same_views():
    augmenter = multicrop_augmenter(16, 8, 2, seed=11, local_blur_prob=0.3)
    x = images()
    restored = MultiCropAugmenter.from_config(augmenter.get_config())
    assert restored.get_config() == augmenter.get_config()
    assert_all_equal(restored(x, step=2), augmenter(x, step=2))

    assert keras.saving.get_registered_name(MultiCropAugmenter) == "Similarity>MultiCropAugmenter"
    # As a `.keras` file stores it: the serialised object as JSON text.
    text = json.dumps(keras.saving.serialize_keras_object(augmenter))
    restored = keras.saving.deserialize_keras_object(json.loads(text))
    assert isinstance(restored, MultiCropAugmenter)
    assert restored.get_config() == augmenter.get_config()
    assert_all_equal(restored(x, step=2), augmenter(x, step=2))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_local=-1), "n_local must be a non-negative integer"),
        (dict(n_local=1.5), "n_local"),
        (dict(global_size=0), "global_size must be a positive integer"),
        (dict(local_size=(8, 0)), "local_size must be a positive integer"),
        (dict(local_size=(8, 8, 8)), "local_size"),
        (dict(global_size=16, local_size=32), "local_size must not exceed global_size"),
        (dict(global_size=16, local_size=(8, 20)), "local_size must not exceed global_size"),
        (dict(global_crop_scale=(0.0, 1.0)), "0 < min <= max <= 1"),
        (dict(local_crop_scale=(0.5, 0.2)), "min <= max"),
        (dict(global_crop_scale=(0.4, 1.5)), "global_crop_scale"),
        (dict(local_crop_scale=0.3), "local_crop_scale must be a pair"),
        (dict(crop_ratio=(0.0, 1.0)), "positive"),
        (dict(flip_prob=1.5), "flip_prob"),
        (dict(hue=0.7), "hue"),
        (dict(brightness=-1), "brightness"),
        (dict(global_blur_prob=(0.5, 0.5, 0.5)), "global_blur_prob"),
        (dict(local_blur_prob=-0.1), "local_blur_prob"),
        (dict(global_solarize_prob=(0.0, 2.0)), "global_solarize_prob"),
        (dict(blur_sigma=(0.0, 1.0)), "blur_sigma"),
        (dict(seed=-1), "seed"),
    ],
)
def test_bad_arguments_are_rejected_before_anything_is_built(kwargs, message, monkeypatch):
    def no_generator(*args, **kwargs):
        raise AssertionError("the seed generator was built before the arguments were checked")

    monkeypatch.setattr(tf.random.Generator, "from_seed", no_generator)
    with pytest.raises(ValueError, match=message) as error:
        MultiCropAugmenter(**kwargs)
    assert "MultiCropAugmenter" in str(error.value)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(flip=False, flip_prob=0.5), ValueError, "flip=False turns off what flip_prob"),
        (dict(color=False, jitter_prob=0.8), ValueError, "color=False turns off what jitter_prob"),
        (dict(flip="no"), TypeError, "flip must be True or False"),
        (dict(n_local=-2), ValueError, "n_local"),
    ],
)
def test_factory_rejects_bad_and_contradictory_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        multicrop_augmenter(**kwargs)


@pytest.mark.parametrize(
    "x, message",
    [
        (tf.zeros((2, 8, 8, 3, 1)), "batch"),
        (tf.zeros((2, 8, 8, 4)), "channels"),
        (tf.zeros((2, 8, 8, 3), tf.bool), "dtype"),
    ],
)
def test_bad_images_are_rejected(x, message):
    with pytest.raises(ValueError, match=message):
        MultiCropAugmenter(8, 4, seed=0)(x)
