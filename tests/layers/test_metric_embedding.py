"""MetricEmbedding against its NumPy formula."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

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


@pytest.mark.parametrize("dtype", ["float16", "mixed_float16", "float32"])
def test_zero_row_gets_no_gradient(dtype):
    # A row that reaches the layer as zeros (a dead ReLU before it) with a bias of zero: its
    # output is zero and it gets no gradient. Before, it got the incoming gradient times
    # 1 / sqrt(1e-12): under the pure float16 policy infinite, and every weight below NaN.
    layer = MetricEmbedding(3, dtype=dtype, kernel_initializer="ones")
    x = tf.constant([[1.0, 0.0], [0.0, 0.0]], dtype=layer.compute_dtype)
    layer.build(x.shape)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x)
        # 1e5 exceeds float16's range once cast: the infinite gradient must not leak through.
        loss = tf.reduce_sum(tf.cast(out, "float32") * tf.constant([[0.5], [1e5]]))
    input_gradient, kernel_gradient = tape.gradient(loss, [x, layer.kernel])
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(out)[1], np.zeros(3))
    input_gradient = keras.ops.convert_to_numpy(input_gradient).astype("float64")
    np.testing.assert_array_equal(input_gradient[1], np.zeros(2))
    # The first row, z = (1, 1, 1): d(0.5 * sum(z / |z|))/dz = 0.5 * (1 - z * sum(z) / |z|^2) / |z|
    # = 0 for every unit, so its input gradient is 0; its kernel gradient is finite.
    np.testing.assert_allclose(input_gradient[0], np.zeros(2), atol=1e-3)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(kernel_gradient)))


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_short_row_gradient_matches_formula(dtype):
    # A row of norm 2e-3, above both floors: the gradient of sum(w * z / |z|) is
    # (w - u * (w . u)) / |z| with u = z / |z|, about 500 times w: finite in float16 too.
    layer = MetricEmbedding(2, dtype=dtype, use_bias=False, kernel_initializer="identity")
    z = np.array([[1.2e-3, 1.6e-3]])
    weights = np.array([[0.3, -0.7]])
    x = tf.constant(z, dtype=layer.compute_dtype)
    layer.build(x.shape)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.cast(layer(x), "float32") * weights.astype("float32"))
    gradient = keras.ops.convert_to_numpy(tape.gradient(loss, x)).astype("float64")
    z = keras.ops.convert_to_numpy(x).astype("float64")
    norm = np.linalg.norm(z)
    unit = z / norm
    expected = (weights - unit * np.sum(weights * unit)) / norm
    np.testing.assert_allclose(gradient, expected, rtol=1e-2 if dtype == "float16" else 1e-4)


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


def test_float16_policy_training_with_a_zero_row_stays_finite():
    # 0.17's integration test under the pure float16 policy, reduced: a zero input row with a
    # zero bias reaches the normalisation as zeros. Its gradient was infinite and Adam's first
    # step made every weight NaN.
    from tensorflow_similarity.losses import TripletLoss
    from tensorflow_similarity.models import SimilarityModel

    keras.mixed_precision.set_global_policy("float16")
    try:
        keras.utils.set_random_seed(0)
        inputs = keras.Input((4,))
        model = SimilarityModel(inputs, MetricEmbedding(3)(inputs))
        model.compile(optimizer="adam", loss=TripletLoss(distance="cosine"))
        x = np.random.default_rng(0).normal(size=(8, 4)).astype("float16")
        x[0] = 0.0
        y = np.array([0, 0, 1, 1, 2, 2, 3, 3])
        model.fit(x, y, batch_size=8, epochs=2, verbose=0)
        for weight in model.weights:
            assert np.all(np.isfinite(keras.ops.convert_to_numpy(weight))), weight.path
    finally:
        keras.mixed_precision.set_global_policy("float32")
