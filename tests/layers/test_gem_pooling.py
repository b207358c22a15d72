"""GeneralizedMeanPooling2D against its NumPy formula."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from tensorflow_similarity.layers.gem_pooling import GeneralizedMeanPooling2D


def gem_reference(x: np.ndarray, p: float, axes=(1, 2)) -> np.ndarray:
    """The documented formula, in float64: shift to start at 1, power mean, shift back."""
    x = x.astype(np.float64)
    low = x.min(axis=axes, keepdims=True)
    shifted = x - low + 1.0
    if p == math.inf:
        pooled = shifted.max(axis=axes, keepdims=True)
    elif p == -math.inf:
        pooled = shifted.min(axis=axes, keepdims=True)
    elif p == 0:
        pooled = np.exp(np.log(shifted).mean(axis=axes, keepdims=True))
    else:
        pooled = np.mean(shifted**p, axis=axes, keepdims=True) ** (1.0 / p)
    return np.squeeze(pooled + low - 1.0, axis=axes)


@pytest.fixture
def features() -> np.ndarray:
    # Signed values, as after swish or layer norm, not only ReLU outputs.
    return np.random.default_rng(0).normal(0.5, 2.0, size=(3, 5, 4, 6)).astype("float32")


@pytest.mark.parametrize("p", [1.0, 3.0, 0.5, 0.0, -2.0, 50.0, math.inf, -math.inf])
def test_matches_numpy_formula(features, p):
    out = keras.ops.convert_to_numpy(GeneralizedMeanPooling2D(p=p)(features))
    np.testing.assert_allclose(out, gem_reference(features, p), rtol=1e-5, atol=1e-5)


def test_limits_are_average_and_max_pooling(features):
    avg = GeneralizedMeanPooling2D(p=1.0)(features)
    mx = GeneralizedMeanPooling2D(p=math.inf)(features)
    np.testing.assert_allclose(avg, features.mean(axis=(1, 2)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mx, features.max(axis=(1, 2)), rtol=0, atol=0)
    # A large finite p approaches max pooling from below, where x ** p would overflow.
    scaled = features * 100
    big = keras.ops.convert_to_numpy(GeneralizedMeanPooling2D(p=2000.0)(scaled))
    assert np.all(np.isfinite(big))
    assert np.all(big <= scaled.max(axis=(1, 2)) + 1e-2)
    assert np.all(big > scaled.mean(axis=(1, 2)))
    span = scaled.max(axis=(1, 2)) - scaled.min(axis=(1, 2))
    assert np.all(scaled.max(axis=(1, 2)) - big < 0.01 * span)


def test_channels_first_and_keepdims(features):
    layer = GeneralizedMeanPooling2D(p=3.0, data_format="channels_first", keepdims=True)
    x = np.transpose(features, (0, 3, 1, 2))
    out = keras.ops.convert_to_numpy(layer(x))
    assert out.shape == (3, 6, 1, 1)
    assert layer.compute_output_shape(x.shape) == (3, 6, 1, 1)
    np.testing.assert_allclose(out[:, :, 0, 0], gem_reference(features, 3.0), rtol=1e-5, atol=1e-5)


def test_gradient_matches_finite_differences():
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(1).normal(size=(1, 2, 2, 1)), tf.float64)
    layer = GeneralizedMeanPooling2D(p=3.0, dtype="float64")
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
    grad = tape.gradient(y, x).numpy().ravel()
    eps = 1e-6
    numeric = []
    for i in range(4):
        d = np.zeros(4)
        d[i] = eps
        plus = gem_reference(x.numpy() + d.reshape(x.shape), 3.0)
        minus = gem_reference(x.numpy() - d.reshape(x.shape), 3.0)
        numeric.append(((plus - minus) / (2 * eps)).item())
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)


def test_mixed_precision_computes_in_float32():
    layer = GeneralizedMeanPooling2D(p=3.0, dtype="mixed_float16")
    x = np.full((1, 4, 4, 2), 200.0, "float32")
    x[0, 0, 0] = 0.0
    out = keras.ops.convert_to_numpy(layer(x))
    assert out.dtype == np.float16
    # In float16, 201 ** 3 would overflow to inf.
    np.testing.assert_allclose(out, gem_reference(x, 3.0), rtol=1e-3)


@pytest.mark.parametrize("p", [float("nan"), "3", None, True])
def test_rejects_bad_p(p):
    with pytest.raises(ValueError, match="p to be a real number"):
        GeneralizedMeanPooling2D(p=p)


def test_rejects_bad_data_format():
    with pytest.raises(ValueError, match="data_format"):
        GeneralizedMeanPooling2D(data_format="NHWC")


def test_keras_file_round_trip(tmp_path, features):
    inputs = keras.Input((5, 4, 6))
    model = keras.Model(inputs, GeneralizedMeanPooling2D(p=4.5, keepdims=True, name="gem")(inputs))
    path = tmp_path / "gem.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    layer = loaded.get_layer("gem")
    assert isinstance(layer, GeneralizedMeanPooling2D)
    assert (layer.p, layer.keepdims) == (4.5, True)
    np.testing.assert_array_equal(loaded(features), model(features))
