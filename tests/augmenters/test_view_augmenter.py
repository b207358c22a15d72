"""ViewAugmenter and the paper presets: seeding, shapes, tf.data, probabilities, config."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.augmenters import (
    ViewAugmenter,
    barlow_augmenter,
    simclr_augmenter,
    simsiam_augmenter,
)

FACTORIES = [simclr_augmenter, simsiam_augmenter, barlow_augmenter]


def images(batch=4, size=12, channels=3, seed=0):
    return tf.random.stateless_uniform((batch, size, size, channels), seed=(seed, 1))


def assert_views_equal(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def differ(a, b):
    return not np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("factory", FACTORIES)
def test_same_seed_same_views_different_seed_different_views(factory):
    x = images()
    first, second = factory(8, seed=3), factory(8, seed=3)
    calls_first = [first(x) for _ in range(2)]
    calls_second = [second(x) for _ in range(2)]
    for a, b in zip(calls_first, calls_second, strict=True):
        assert_views_equal(a, b)
    view1, view2 = calls_first[0]
    assert differ(view1, view2)
    assert differ(calls_first[0][0], calls_first[1][0]), "successive calls must give new views"
    assert differ(factory(8, seed=4)(x)[0], view1)


@pytest.mark.parametrize(
    "shape, image_size, expected",
    [
        ((4, 20, 20, 3), 16, (4, 16, 16, 3)),
        ((4, 20, 16, 3), (10, 12), (4, 10, 12, 3)),
        ((4, 8, 8, 1), 32, (4, 32, 32, 1)),  # digits upscaled
        ((20, 20, 3), None, (20, 20, 3)),  # one image
    ],
)
def test_output_shape_dtype_and_range(shape, image_size, expected):
    x = tf.random.stateless_uniform(shape, seed=(1, 2))
    for view in barlow_augmenter(image_size, seed=0)(x):
        assert view.shape == expected and view.dtype == tf.float32
        assert 0.0 <= float(tf.reduce_min(view)) and float(tf.reduce_max(view)) <= 1.0


@pytest.mark.parametrize("jitter_prob", [0.0, 0.8])
def test_views_with_blur_stay_in_unit_range(jitter_prob):
    # Bright images, many at exactly 1: where rounding could leave the range.
    x = tf.minimum(1.0, 1.02 - 0.1 * images(batch=128, size=24))
    augmenter = ViewAugmenter(16, jitter_prob=jitter_prob, blur_prob=1.0, seed=0)
    for view in augmenter(x):
        assert 0.0 <= float(tf.reduce_min(view)) and float(tf.reduce_max(view)) <= 1.0


def test_uint8_images_are_rescaled():
    x = images(size=8)
    augmenter = ViewAugmenter(seed=0)
    as_uint8 = tf.cast(tf.round(x * 255), tf.uint8)
    expected = augmenter(tf.cast(as_uint8, tf.float32) / 255.0, step=5)
    for a, b in zip(augmenter(as_uint8, step=5), expected, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_one_channel_images_augment_as_grey_rgb_images():
    x = images(size=8, channels=1)
    augmenter = simclr_augmenter(16, seed=2)
    grey = augmenter(x, step=1)
    rgb = augmenter(tf.tile(x, [1, 1, 1, 3]), step=1)
    for a, b in zip(grey, rgb, strict=True):
        np.testing.assert_allclose(tf.tile(a, [1, 1, 1, 3]), b, atol=1e-5)


def assert_views_close(a, b):
    # Graph-mode kernels may round differently from eager ones in the last bits.
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5)


def test_step_makes_views_a_function_of_seed_and_step_eagerly_and_in_tf_function():
    x = images()
    augmenter = simsiam_augmenter(8, seed=5)
    eager = augmenter(x, step=7)
    assert_views_equal(eager, simsiam_augmenter(8, seed=5)(x, step=7))
    assert differ(eager[0], augmenter(x, step=8)[0])
    traced = tf.function(lambda batch, step: augmenter(batch, step=step))
    assert_views_close(traced(x, tf.constant(7, tf.int64)), eager)


def test_dataset_map_gives_the_eager_sequence_of_views():
    x = images(batch=6)
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(3).map(simclr_augmenter(8, seed=9))
    reference = simclr_augmenter(8, seed=9)
    for batch, views in zip(tf.split(x, 2), dataset, strict=True):
        assert_views_close(views, reference(batch))


def test_dataset_map_with_enumerated_steps_is_reproducible_in_parallel():
    x = images(batch=4)
    # Without colour jitter the graph is smaller and traces faster; seeding is the point here.
    augmenter = barlow_augmenter(8, seed=1, jitter_prob=0.0)
    dataset = (
        tf.data.Dataset.from_tensor_slices(x)
        .enumerate()
        .map(lambda i, image: (i, augmenter(image, step=i)), num_parallel_calls=4)
    )
    seen = []
    for i, views in dataset.as_numpy_iterator():
        assert_views_close(views, augmenter(x[i], step=i))
        seen.append(i)
    assert sorted(seen) == [0, 1, 2, 3]


def test_parallel_map_without_steps_gives_distinct_views():
    x = tf.repeat(images(batch=1), 16, axis=0)
    dataset = tf.data.Dataset.from_tensor_slices(x).map(
        simclr_augmenter(8, seed=0, jitter_prob=0.0), num_parallel_calls=4
    )
    views = [tuple(np.round(v[0].numpy().ravel(), 5)) for v in dataset]
    assert len(set(views)) == 16


def test_grayscale_fraction_of_full_simclr_pipeline():
    # SimCLR's saturation factor is at least 0.2, so a view is grey exactly when
    # the greyscale step (p=0.2) fired; both views of 1500 images are 3000 draws.
    x = images(batch=1500, size=6)
    view1, view2 = simclr_augmenter(seed=0)(x)
    views = tf.concat([view1, view2], axis=0)
    spread = tf.reduce_max(views, axis=-1) - tf.reduce_min(views, axis=-1)
    grey = tf.reduce_all(spread < 1e-6, axis=[1, 2])
    assert abs(float(tf.reduce_mean(tf.cast(grey, tf.float32))) - 0.2) < 0.04


def test_barlow_views_are_asymmetric():
    # Every first view is blurred and none is solarised; for a constant bright
    # image blur is invisible and solarisation (p=0.2 on view 2) maps 0.9 to 0.1.
    config = barlow_augmenter().get_config()
    assert config["blur_prob"] == [1.0, 0.1] and config["solarize_prob"] == [0.0, 0.2]
    x = tf.fill((2000, 4, 4, 1), 0.9)
    augmenter = barlow_augmenter(seed=0, jitter_prob=0.0)
    view1, view2 = augmenter(x)
    np.testing.assert_allclose(view1, 0.9, atol=1e-5)
    solarised = tf.reduce_all(tf.abs(view2 - 0.1) < 1e-5, axis=[1, 2, 3])
    assert abs(float(tf.reduce_mean(tf.cast(solarised, tf.float32))) - 0.2) < 0.04


@pytest.mark.parametrize(
    "factory, expected",
    [
        (
            simclr_augmenter,
            dict(crop_scale=[0.08, 1.0], brightness=0.8, hue=0.2, blur_prob=[0.5, 0.5]),
        ),
        (
            simsiam_augmenter,
            dict(crop_scale=[0.2, 1.0], brightness=0.4, hue=0.1, blur_prob=[0.5, 0.5]),
        ),
        (barlow_augmenter, dict(crop_scale=[0.08, 1.0], saturation=0.2, solarize_prob=[0.0, 0.2])),
    ],
)
def test_presets_use_the_papers_parameters_and_accept_overrides(factory, expected):
    config = factory(32).get_config()
    assert config["image_size"] == [32, 32]
    assert config["jitter_prob"] == 0.8 and config["grayscale_prob"] == 0.2
    assert config["flip_prob"] == 0.5 and config["blur_sigma"] == [0.1, 2.0]
    for key, value in expected.items():
        assert config[key] == pytest.approx(value)
    assert factory(32, blur_prob=0.0).get_config()["blur_prob"] == [0.0, 0.0]


def test_simclr_color_strength_scales_the_jitter():
    config = simclr_augmenter(color_strength=0.5).get_config()
    assert config["brightness"] == pytest.approx(0.4) and config["hue"] == pytest.approx(0.1)


def test_serialization_round_trip_gives_the_same_views():
    augmenter = barlow_augmenter(8, seed=11)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(augmenter))
    assert isinstance(restored, ViewAugmenter)
    assert restored.get_config() == augmenter.get_config()
    assert_views_equal(restored(images(), step=2), augmenter(images(), step=2))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(image_size=0), "image_size"),
        (dict(image_size=(8, 8, 8)), "image_size"),
        (dict(crop_scale=(0.5, 0.2)), "min <= max"),
        (dict(crop_scale=(0.0, 1.0)), "positive"),
        (dict(crop_ratio=(0.0, 1.0)), "positive"),
        (dict(flip_prob=1.5), "flip_prob"),
        (dict(hue=0.7), "hue"),
        (dict(brightness=-1), "brightness"),
        (dict(blur_prob=(0.5, 0.5, 0.5)), "blur_prob"),
        (dict(solarize_prob=(0.0, 2.0)), "solarize_prob"),
        (dict(blur_sigma=(0.0, 1.0)), "blur_sigma"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ViewAugmenter(**kwargs)


@pytest.mark.parametrize(
    "x, message",
    [
        (tf.zeros((2, 8, 8, 3, 1)), "batch"),
        (tf.zeros((2, 8, 8, 4)), "channels"),
        (tf.zeros((2, 3, 8, 8)), "channels"),
        (tf.zeros((2, 8, 8, 3), tf.bool), "dtype"),
    ],
)
def test_bad_images_are_rejected(x, message):
    with pytest.raises(ValueError, match=message):
        ViewAugmenter(seed=0)(x)


def test_unknown_image_size_is_rejected_in_graphs():
    augmenter = ViewAugmenter(seed=0)
    traced = tf.function(augmenter, input_signature=[tf.TensorSpec((None, None, None, 3))])
    with pytest.raises(ValueError, match="static height and width"):
        traced.get_concrete_function()
