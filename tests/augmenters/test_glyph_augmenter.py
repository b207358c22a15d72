"""GlyphAugmenter: affine warps and stroke widths, checked against NumPy references."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.augmenters import GlyphAugmenter

STILL = {"rotation": 0.0, "scale": 0.0, "shear": 0.0, "shift": 0.0, "stroke": 0.0}


def _blob_images(batch: int = 6, size: int = 16) -> np.ndarray:
    """Light shapes on black, away from the border (so no warp pushes ink out)."""
    rng = np.random.default_rng(0)
    images = np.zeros((batch, size, size, 1), np.float32)
    images[:, 5:11, 5:11, 0] = rng.uniform(0.3, 1.0, size=(batch, 6, 6))
    return images


def _filter3x3(images: np.ndarray, reduce) -> np.ndarray:
    """3x3 grey dilation (`np.max`) or erosion (`np.min`) with plain loops, 'same' padding."""
    out = np.empty_like(images)
    _, height, width, _ = images.shape
    for i in range(height):
        for j in range(width):
            window = images[:, max(i - 1, 0) : i + 2, max(j - 1, 0) : j + 2, :]
            out[:, i, j, :] = reduce(window, axis=(1, 2))
    return out


def test_no_ranges_is_the_identity():
    images = _blob_images()
    view1, view2 = GlyphAugmenter(**STILL, seed=0)(images, step=3)
    np.testing.assert_allclose(view1.numpy(), images, atol=1e-6)
    np.testing.assert_allclose(view2.numpy(), images, atol=1e-6)


def test_stroke_width_stays_between_the_eroded_and_the_dilated_image():
    images = _blob_images()
    view1, view2 = GlyphAugmenter(**{**STILL, "stroke": 1.0}, seed=1)(images, step=0)
    thinner, thicker = _filter3x3(images, np.min), _filter3x3(images, np.max)
    for view in (view1.numpy(), view2.numpy()):
        assert np.all(view >= thinner - 1e-6) and np.all(view <= thicker + 1e-6)
        assert not np.allclose(view, images)  # it did change the strokes


def test_a_shift_moves_the_ink_and_keeps_it():
    images = _blob_images()
    view, _ = GlyphAugmenter(**{**STILL, "shift": 0.1}, seed=2)(images, step=0)
    view = view.numpy()
    np.testing.assert_allclose(view.sum(axis=(1, 2, 3)), images.sum(axis=(1, 2, 3)), rtol=1e-4)
    rows = np.arange(16, dtype=np.float64)[None, :, None, None]
    centre = lambda x: (x * rows).sum(axis=(1, 2, 3)) / x.sum(axis=(1, 2, 3))  # noqa: E731
    moved = centre(view) - centre(images)
    assert np.all(np.abs(moved) <= 0.1 * 16 + 1e-4) and np.any(np.abs(moved) > 0.1)


def test_a_rotation_turns_the_ink_about_the_image_centre():
    """With only a rotation drawn, a centred shape keeps its centre of mass (the warp turns
    about the image centre, not a corner)."""
    images = _blob_images(batch=2)
    view, _ = GlyphAugmenter(**{**STILL, "rotation": 0.3}, seed=4)(images, step=0)
    coords = np.arange(16, dtype=np.float64)
    for axis in (1, 2):
        shape = [1, 1, 1, 1]
        shape[axis] = 16
        grid = coords.reshape(shape)
        before = (images * grid).sum(axis=(1, 2, 3)) / images.sum(axis=(1, 2, 3))
        after = (view.numpy() * grid).sum(axis=(1, 2, 3)) / view.numpy().sum(axis=(1, 2, 3))
        np.testing.assert_allclose(after, before, atol=0.35)


def test_views_are_a_function_of_seed_and_step():
    images = _blob_images()
    augmenter = GlyphAugmenter(seed=5)
    first = [v.numpy() for v in augmenter(images, step=7)]
    again = [v.numpy() for v in GlyphAugmenter(seed=5)(tf.constant(images), step=7)]
    other = augmenter(images, step=8)[0].numpy()
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], first[1]) and not np.array_equal(first[0], other)


def test_config_round_trips_and_bad_ranges_are_refused():
    augmenter = GlyphAugmenter(image_size=12, rotation=0.2, stroke=0.3, seed=9)
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(augmenter))
    assert type(rebuilt) is GlyphAugmenter and rebuilt.get_config() == augmenter.get_config()
    assert rebuilt(_blob_images(), step=0)[0].shape == (6, 12, 12, 1)
    for name, value in (("stroke", 1.5), ("shift", -0.1), ("rotation", float("nan"))):
        with pytest.raises(ValueError, match=name):
            GlyphAugmenter(**{name: value})
