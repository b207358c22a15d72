"""MoCoV3Loss against its NumPy formula, its stop-gradient, reductions and config."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import MoCoV3Loss
from tests.losses import numpy_reference


def _views(shape, seed=0):
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=shape)
    return keys, keys + rng.normal(size=shape)


@pytest.mark.parametrize(
    ("shape", "temperature"), [((2, 3), 0.2), ((5, 4), 0.5), ((12, 8), 1.0), ((7, 2), 0.05)]
)
def test_matches_numpy_formula(shape, temperature):
    keys, queries = _views(shape, seed=shape[0])
    expected = numpy_reference.mocov3_terms(keys, queries, temperature)

    def loss(**kwargs):
        return MoCoV3Loss(temperature=temperature, dtype="float64", **kwargs)(keys, queries)

    np.testing.assert_allclose(loss().numpy(), expected.mean(), rtol=1e-12)
    np.testing.assert_allclose(loss(reduction="sum").numpy(), expected.sum(), rtol=1e-12)
    np.testing.assert_allclose(loss(reduction="none").numpy(), expected, rtol=1e-12, atol=1e-14)


def test_is_invariant_to_the_scale_of_each_embedding():
    rng = np.random.default_rng(3)
    keys, queries = _views((6, 4), seed=3)
    loss = MoCoV3Loss(dtype="float64")

    scaled = loss(keys * rng.uniform(0.1, 10.0, (6, 1)), queries * rng.uniform(0.1, 10.0, (6, 1)))
    np.testing.assert_allclose(scaled.numpy(), loss(keys, queries).numpy(), rtol=1e-12)


def test_gradient_reaches_the_queries_and_not_the_keys():
    keys, queries = (tf.constant(v) for v in _views((6, 4), seed=1))

    with tf.GradientTape(persistent=True) as tape:
        tape.watch([keys, queries])
        value = MoCoV3Loss(dtype="float64")(keys, queries)
    gradient = tape.gradient(value, queries).numpy()

    assert tape.gradient(value, keys) is None
    assert np.all(np.isfinite(gradient)) and np.abs(gradient).max() > 1e-3
    # A central difference of the NumPy formula on one coordinate.
    step = 1e-6
    bumped = [queries.numpy().copy() for _ in range(2)]
    bumped[0][2, 1] += step
    bumped[1][2, 1] -= step
    up, down = (numpy_reference.mocov3_terms(keys.numpy(), q, 0.2).mean() for q in bumped)
    np.testing.assert_allclose(gradient[2, 1], (up - down) / (2 * step), rtol=1e-6)


def test_gradient_is_finite_at_a_low_temperature():
    keys, queries = (tf.constant(v, tf.float32) for v in _views((8, 4), seed=4))

    with tf.GradientTape() as tape:
        tape.watch(queries)
        value = MoCoV3Loss(temperature=0.01)(keys, queries)

    assert np.isfinite(value.numpy()) and np.all(np.isfinite(tape.gradient(value, queries)))


def test_config_round_trip():
    loss = MoCoV3Loss(temperature=0.3, reduction="none", name="moco", dtype="float64")
    keys, queries = _views((4, 3), seed=2)

    serialized = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(serialized)

    assert serialized["registered_name"] == "Similarity>MoCoV3Loss"
    assert type(restored) is MoCoV3Loss
    assert restored.get_config() == loss.get_config()
    assert loss.get_config()["temperature"] == 0.3
    np.testing.assert_allclose(
        restored(keys, queries).numpy(), loss(keys, queries).numpy(), rtol=1e-12
    )


def test_rejects_invalid_temperature():
    for temperature in (0.0, -0.1, float("nan"), float("inf"), "0.2", None, True):
        with pytest.raises(ValueError, match="MoCoV3Loss: temperature must be a finite number > 0"):
            MoCoV3Loss(temperature=temperature)
    assert MoCoV3Loss(temperature=np.float32(0.5)).get_config()["temperature"] == 0.5


def test_rejects_bad_reductions_and_inputs():
    with pytest.raises(ValueError, match="MoCoV3Loss: unknown reduction='max'"):
        MoCoV3Loss(reduction="max")
    with pytest.raises(ValueError, match="at least 2 samples, received 1"):
        MoCoV3Loss()(np.ones((1, 3)), np.ones((1, 3)))
    with pytest.raises(ValueError, match="MoCoV3Loss expects both views to have the same shape"):
        MoCoV3Loss()(np.ones((4, 3)), np.ones((5, 3)))


def test_a_zero_query_row_gets_no_gradient():
    keys, queries = _views((5, 4), seed=5)
    queries[0] = 0.0
    queries = tf.constant(queries)

    with tf.GradientTape() as tape:
        tape.watch(queries)
        value = MoCoV3Loss(dtype="float64")(keys, queries)
    gradient = tape.gradient(value, queries).numpy()

    assert np.isfinite(value.numpy())
    assert np.all(np.isfinite(gradient)) and np.all(gradient[0] == 0.0)
    assert np.abs(gradient[1:]).max() > 1e-3
