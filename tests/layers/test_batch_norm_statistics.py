"""`recompute_batch_norm_statistics` against a float64 NumPy formula written with loops."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.layers import SyncBatchNormalization, recompute_batch_norm_statistics
from tensorflow_similarity.testing import mirrored_strategy

EPSILON = 1e-3


def _model(batch_norm=keras.layers.BatchNormalization) -> keras.Model:
    keras.config.set_dtype_policy("float64")
    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [
            keras.Input((3,), dtype="float64"),
            keras.layers.Dense(4),
            batch_norm(epsilon=EPSILON),
            keras.layers.Dense(2),
            batch_norm(epsilon=EPSILON),
        ]
    )
    rng = np.random.default_rng(0)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.gamma.assign(rng.uniform(0.5, 2.0, layer.gamma.shape))
            layer.beta.assign(rng.normal(size=layer.beta.shape))
            layer.moving_mean.assign(rng.normal(size=layer.moving_mean.shape))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, layer.moving_variance.shape))
    return model


def _reference(model: keras.Model, images: np.ndarray, batch_size: int) -> list[tuple]:
    """Each batch norm layer's size-weighted mean of batch means and biased variances."""
    dense = [np.asarray(layer.kernel) for layer in model.layers[0::2]]
    biases = [np.asarray(layer.bias) for layer in model.layers[0::2]]
    norms = model.layers[1::2]
    sums = [[np.zeros(2 if i else 4), np.zeros(2 if i else 4)] for i in range(2)]
    for start in range(0, len(images), batch_size):
        batch = images[start : start + batch_size]
        x = batch
        for i, norm in enumerate(norms):
            h = np.zeros((len(x), dense[i].shape[1]))
            for row in range(len(x)):
                for out in range(dense[i].shape[1]):
                    h[row, out] = biases[i][out] + sum(
                        x[row, k] * dense[i][k, out] for k in range(dense[i].shape[0])
                    )
            if norm.trainable:
                mean = h.mean(axis=0)
                variance = ((h - mean) ** 2).mean(axis=0)
                sums[i][0] += len(batch) * mean
                sums[i][1] += len(batch) * variance
            else:  # frozen: normalises with its moving statistics, even in training mode
                mean = np.asarray(norm.moving_mean)
                variance = np.asarray(norm.moving_variance)
            x = np.asarray(norm.gamma) * (h - mean) / np.sqrt(variance + EPSILON) + np.asarray(
                norm.beta
            )
    count = len(images)
    return [
        (s[0] / count, s[1] / count) if norm.trainable else None
        for s, norm in zip(sums, norms, strict=True)
    ]


@pytest.mark.parametrize("count, batch_size", [(10, 4), (10, 10), (7, 256)])
def test_statistics_are_the_size_weighted_batch_average(count, batch_size):
    model = _model()
    images = np.random.default_rng(1).normal(size=(count, 3))
    weights = [np.copy(w) for w in model.get_weights()]
    trainable = [np.copy(w) for w in model.trainable_weights]
    expected = _reference(model, images, batch_size)

    assert recompute_batch_norm_statistics(model, images, batch_size=batch_size) == 2

    for norm, (mean, variance) in zip(model.layers[1::2], expected, strict=True):
        np.testing.assert_allclose(norm.moving_mean, mean, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(norm.moving_variance, variance, rtol=1e-12, atol=1e-12)
        assert norm.momentum == 0.99
    for before, after in zip(trainable, model.trainable_weights, strict=True):
        np.testing.assert_array_equal(before, after)
    assert any(not np.array_equal(a, b) for a, b in zip(weights, model.get_weights(), strict=True))


def test_a_frozen_layer_keeps_its_statistics_and_normalises_with_them():
    model = _model()
    frozen = model.layers[1]
    frozen.trainable = False
    kept = (np.copy(frozen.moving_mean), np.copy(frozen.moving_variance))
    images = np.random.default_rng(2).normal(size=(9, 3))
    expected = _reference(model, images, 4)

    assert recompute_batch_norm_statistics(model, images, batch_size=4) == 1

    np.testing.assert_array_equal(frozen.moving_mean, kept[0])
    np.testing.assert_array_equal(frozen.moving_variance, kept[1])
    mean, variance = expected[1]
    np.testing.assert_allclose(model.layers[3].moving_mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.layers[3].moving_variance, variance, rtol=1e-12, atol=1e-12)


def test_layers_of_a_nested_model_are_reached():
    inner = _model()
    images = np.random.default_rng(3).normal(size=(10, 3))
    expected = _reference(inner, images, 4)
    inputs = keras.Input((3,), dtype="float64")
    outer = keras.Model(inputs, keras.layers.Dense(1)(inner(inputs)))

    assert recompute_batch_norm_statistics(outer, images, batch_size=4) == 2

    for norm, (mean, variance) in zip(inner.layers[1::2], expected, strict=True):
        np.testing.assert_allclose(norm.moving_mean, mean, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(norm.moving_variance, variance, rtol=1e-12, atol=1e-12)


def test_sync_batch_norm_under_a_strategy_as_in_a_callback_of_fit():
    strategy = mirrored_strategy(2)
    with strategy.scope():
        model = _model(SyncBatchNormalization)
    images = np.random.default_rng(4).normal(size=(10, 3))
    expected = _reference(model, images, 4)

    assert recompute_batch_norm_statistics(model, images, batch_size=4) == 2

    for norm, (mean, variance) in zip(model.layers[1::2], expected, strict=True):
        for stat, value in ((norm.moving_mean, mean), (norm.moving_variance, variance)):
            for replica_value in strategy.experimental_local_results(stat.value):
                np.testing.assert_allclose(replica_value, value, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "images, batch_size, match",
    [
        (np.zeros((0, 3)), 4, "images is empty"),
        (np.zeros((4, 3)), 0, "batch_size must be a positive integer; got 0"),
        (np.zeros((4, 3)), True, "batch_size must be a positive integer; got True"),
        (np.zeros((4, 3)), 2.0, "batch_size must be a positive integer; got 2.0"),
    ],
)
def test_bad_arguments_are_refused(images, batch_size, match):
    with pytest.raises(ValueError, match=match):
        recompute_batch_norm_statistics(_model(), images, batch_size=batch_size)


def test_a_model_without_trainable_batch_norm_is_refused():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)], name="plain")
    with pytest.raises(ValueError, match="plain has no trainable batch norm layer"):
        recompute_batch_norm_statistics(model, np.zeros((4, 3)))
