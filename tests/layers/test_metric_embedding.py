"""MetricEmbedding against its NumPy formula."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.layers.metric_embedding import MetricEmbedding


def test_matches_numpy_formula():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 7)).astype("float32")
    layer = MetricEmbedding(4)
    out = keras.ops.convert_to_numpy(layer(x))
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in layer.weights)
    z = x.astype(np.float64) @ kernel + bias
    expected = z / np.sqrt(np.maximum((z**2).sum(axis=-1, keepdims=True), 1e-12))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, atol=1e-5)


def test_zero_row_stays_zero():
    layer = MetricEmbedding(3, use_bias=False)
    out = keras.ops.convert_to_numpy(layer(np.zeros((2, 4), "float32")))
    np.testing.assert_array_equal(out, np.zeros((2, 3)))


def test_weights_are_dense_weights():
    x = np.random.default_rng(1).normal(size=(3, 6)).astype("float32")
    dense = keras.layers.Dense(5)
    z = keras.ops.convert_to_numpy(dense(x))
    layer = MetricEmbedding(5)
    layer.build(x.shape)
    layer.set_weights(dense.get_weights())
    out = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(out, z / np.linalg.norm(z, axis=-1, keepdims=True), rtol=1e-5)


def test_mixed_precision_output_is_unit_length():
    layer = MetricEmbedding(8, dtype="mixed_float16")
    out = keras.ops.convert_to_numpy(layer(np.full((2, 16), 300.0, "float32")))
    assert out.dtype == np.float16
    np.testing.assert_allclose(np.linalg.norm(out.astype("float32"), axis=-1), 1.0, atol=2e-3)


def test_keras_file_round_trip(tmp_path):
    inputs = keras.Input((6,))
    model = keras.Model(inputs, MetricEmbedding(4, name="embedding")(inputs))
    path = tmp_path / "embedding.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.get_layer("embedding"), MetricEmbedding)
    assert loaded.get_layer("embedding").units == 4
    x = np.random.default_rng(2).normal(size=(3, 6)).astype("float32")
    np.testing.assert_array_equal(loaded(x), model(x))
