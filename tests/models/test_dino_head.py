"""WeightNormalizedDense against its NumPy formula, and DINO's head built and saved."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.layers import MetricEmbedding, SyncBatchNormalization
from tensorflow_similarity.models.dino_head import WeightNormalizedDense, build_dino_head

SMALL = {"output_dim": 16, "hidden_dim": 12, "bottleneck_dim": 8}


def weight_normalized_dense(x, kernel, gain, bias):
    """`x @ (V / ||V||_column) * g + b`, with explicit loops, in float64."""
    x, kernel = np.float64(x), np.float64(kernel)
    (features, units), out = kernel.shape, np.zeros((len(x), kernel.shape[1]))
    for u in range(units):
        norm = np.sqrt(sum(kernel[f, u] ** 2 for f in range(features)))
        for r in range(len(x)):
            dot = sum(x[r, f] * kernel[f, u] / norm for f in range(features))
            out[r, u] = gain[u] * dot + bias[u]
    return out


def _layer(x, **kwargs):
    layer = WeightNormalizedDense(5, dtype="float64", **kwargs)
    layer.build(x.shape)
    rng = np.random.default_rng(1)
    for weight in layer.weights:
        weight.assign(rng.uniform(0.5, 2.0, size=weight.shape) * rng.choice([-1, 1], weight.shape))
    return layer


@pytest.mark.parametrize(
    ("normalize_scale", "use_bias"), [(True, False), (False, False), (False, True), (True, True)]
)
def test_matches_numpy_formula(normalize_scale, use_bias):
    x = np.random.default_rng(0).normal(size=(4, 7))
    layer = _layer(x, normalize_scale=normalize_scale, use_bias=use_bias)
    gain = layer.gain.numpy() if layer.gain is not None else np.ones(5)
    bias = layer.bias.numpy() if layer.bias is not None else np.zeros(5)

    expected = weight_normalized_dense(x, layer.kernel.numpy(), gain, bias)

    np.testing.assert_allclose(layer(x).numpy(), expected, rtol=1e-12, atol=1e-12)
    assert not np.allclose(gain, 1.0) or normalize_scale


def test_the_gain_is_fixed_at_1_or_a_trainable_weight_starting_at_1():
    fixed, trained = WeightNormalizedDense(3), WeightNormalizedDense(3, normalize_scale=False)
    fixed.build((None, 4))
    trained.build((None, 4))

    assert [w.name for w in fixed.trainable_weights] == ["kernel"]
    assert [w.name for w in trained.trainable_weights] == ["kernel", "gain"]
    np.testing.assert_array_equal(trained.gain.numpy(), np.ones(3))


def test_only_each_columns_direction_counts():
    x = np.random.default_rng(2).normal(size=(3, 6))
    layer = _layer(x)
    before = layer(x).numpy()

    layer.kernel.assign(layer.kernel.numpy() * np.array([[0.1, 3.0, 7.0, 1.0, 42.0]]))

    np.testing.assert_allclose(layer(x).numpy(), before, rtol=1e-12)


def test_gradients_reach_the_kernel_and_the_inputs():
    x = tf.constant(np.random.default_rng(3).normal(size=(3, 6)))
    layer = _layer(x, normalize_scale=False)

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(layer(x) ** 2)
    grads = tape.gradient(y, [x, layer.kernel, layer.gain])

    assert all(np.abs(g.numpy()).max() > 1e-3 for g in grads)
    # Only directions count: the kernel's gradient is orthogonal to each column.
    kernel_gradient = grads[1].numpy()
    np.testing.assert_allclose(
        np.sum(kernel_gradient * layer.kernel.numpy(), axis=0), 0, atol=1e-10
    )


def test_config_round_trip():
    layer = WeightNormalizedDense(
        4, use_bias=True, normalize_scale=False, kernel_initializer="he_normal", name="last"
    )

    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))

    assert type(restored) is WeightNormalizedDense
    assert restored.get_config() == layer.get_config()
    assert layer.get_config()["normalize_scale"] is False and layer.get_config()["units"] == 4


def test_layer_rejects_bad_arguments():
    for units in (0, -3, 2.5, None, True):
        with pytest.raises(ValueError, match="WeightNormalizedDense: units must be a positive"):
            WeightNormalizedDense(units)
    with pytest.raises(TypeError, match="WeightNormalizedDense: normalize_scale must be True"):
        WeightNormalizedDense(3, normalize_scale="yes")
    with pytest.raises(TypeError, match="WeightNormalizedDense: use_bias must be True"):
        WeightNormalizedDense(3, use_bias=1)


def test_head_is_dino_s():
    head = build_dino_head(20, hidden_layers=2, **SMALL)
    dense = [layer for layer in head.layers if type(layer) is keras.layers.Dense]

    assert head.name == "projector"
    assert head.input_shape == (None, 20) and head.output_shape == (None, 16)
    assert [d.units for d in dense] == [12, 12]
    assert sum(isinstance(layer, keras.layers.Activation) for layer in head.layers) == 2
    assert not any(isinstance(layer, keras.layers.BatchNormalization) for layer in head.layers)
    assert isinstance(head.layers[-2], MetricEmbedding) and head.layers[-2].units == 8
    last = head.layers[-1]
    assert isinstance(last, WeightNormalizedDense) and last.normalize_scale and not last.use_bias
    # Dense kernels: truncated normal of std 0.02; biases: zero.
    kernels = np.concatenate([d.kernel.numpy().ravel() for d in [*dense, head.layers[-2]]])
    assert 0.012 < kernels.std() < 0.025 and np.abs(kernels).max() <= 0.04 + 1e-7
    assert all(np.all(d.bias.numpy() == 0) for d in [*dense, head.layers[-2]])
    # The bottleneck is on the unit sphere, so with g = 1 the logits are cosines.
    logits = head(np.random.default_rng(4).normal(size=(5, 20)).astype("float32")).numpy()
    assert np.abs(logits).max() <= 1.0 + 1e-6


def test_head_depth_batch_norm_and_trainable_gain():
    shallow = build_dino_head(20, hidden_layers=0, **SMALL)
    with_bn = build_dino_head(20, use_bn=True, sync_bn=True, norm_last_layer=False, **SMALL)

    assert not any(type(layer) is keras.layers.Dense for layer in shallow.layers)
    synced = [layer for layer in with_bn.layers if isinstance(layer, SyncBatchNormalization)]
    assert [layer.name for layer in synced] == ["projector_bn0", "projector_bn1"]
    assert with_bn.layers[-1].gain is not None and with_bn.layers[-1].gain.trainable


def test_head_survives_a_keras_file(tmp_path):
    head = build_dino_head(20, use_bn=True, norm_last_layer=False, name="student", **SMALL)
    x = np.random.default_rng(5).normal(size=(6, 20)).astype("float32")
    head.layers[-1].gain.assign(np.linspace(0.5, 2.0, 16))
    head.save(tmp_path / "head.keras")

    loaded = keras.saving.load_model(tmp_path / "head.keras")

    assert loaded.name == "student"
    assert isinstance(loaded.layers[-1], WeightNormalizedDense)
    np.testing.assert_allclose(loaded(x).numpy(), head(x).numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(loaded.layers[-1].gain.numpy(), np.linspace(0.5, 2.0, 16))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_dim": 0}, "input_dim must be a positive integer"),
        ({"output_dim": -1}, "output_dim must be a positive integer"),
        ({"hidden_dim": 0}, "hidden_dim must be a positive integer"),
        ({"bottleneck_dim": 2.0}, "bottleneck_dim must be a positive integer"),
        ({"hidden_layers": -1}, "build_dino_head: hidden_layers must be a non-negative integer"),
    ],
)
def test_head_rejects_bad_widths_before_building(kwargs, message, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was built")

    monkeypatch.setattr(keras, "Input", no_model)
    with pytest.raises(ValueError, match=message):
        build_dino_head(**{"input_dim": 20, **SMALL, **kwargs})


@pytest.mark.parametrize(("policy", "atol"), [("mixed_float16", 5e-3), ("mixed_bfloat16", 2e-2)])
def test_half_precision_head_computes_bottleneck_and_prototypes_in_float32(policy, atol):
    # DINO's init shrinks the activations: the bottleneck's rows have norms near 1e-4, which
    # float16's L2-normalisation floor (1e-3) would leave unnormalised (logits ~10x too small).
    keras.utils.set_random_seed(0)
    reference = build_dino_head(4, **SMALL)
    keras.config.set_dtype_policy(policy)
    head = build_dino_head(4, **SMALL)
    keras.config.set_dtype_policy("float32")
    head.set_weights(reference.get_weights())
    x = np.random.default_rng(6).normal(size=(6, 4)).astype("float32")

    logits = head(x)

    assert head.layers[-2].compute_dtype == head.layers[-1].compute_dtype == "float32"
    assert head.layers[1].compute_dtype == policy.removeprefix("mixed_")
    assert logits.dtype == "float32"
    np.testing.assert_allclose(logits.numpy(), reference(x).numpy(), rtol=0, atol=atol)
