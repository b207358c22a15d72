"""BYOLLoss against its NumPy formula, its stop-gradient, reductions and config."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import BYOLLoss
from tests.losses import numpy_reference


def _views(shape, seed=0):
    rng = np.random.default_rng(seed)
    target = rng.normal(size=shape)
    return target, target + rng.normal(size=shape)


@pytest.mark.parametrize("shape", [(1, 3), (5, 4), (16, 8)])
def test_matches_numpy_formula(shape):
    target, prediction = _views(shape, seed=shape[0])
    expected = numpy_reference.byol_terms(target, prediction)

    mean = BYOLLoss(dtype="float64")(target, prediction)
    total = BYOLLoss(reduction="sum", dtype="float64")(target, prediction)
    terms = BYOLLoss(reduction="none", dtype="float64")(target, prediction)

    np.testing.assert_allclose(mean.numpy(), expected.mean(), rtol=1e-12)
    np.testing.assert_allclose(total.numpy(), expected.sum(), rtol=1e-12)
    np.testing.assert_allclose(terms.numpy(), expected, rtol=1e-12)


def test_same_direction_is_0_and_opposite_is_4():
    z = np.array([[1.0, 2.0], [-3.0, 0.5]], "float32")

    np.testing.assert_allclose(BYOLLoss()(z, 3.0 * z).numpy(), 0.0, atol=1e-6)
    np.testing.assert_allclose(BYOLLoss()(z, -z).numpy(), 4.0, rtol=1e-6)


def test_gradient_reaches_the_prediction_and_not_the_target():
    target, prediction = (tf.constant(v) for v in _views((6, 4), seed=1))

    with tf.GradientTape(persistent=True) as tape:
        tape.watch([target, prediction])
        value = BYOLLoss(dtype="float64")(target, prediction)
    gradient = tape.gradient(value, prediction).numpy()

    assert tape.gradient(value, target) is None
    # d/dq of 2 - 2 <q/|q|, u> is -2 (u - <u, q^> q^) / |q|, over the batch of 6.
    u = target.numpy() / np.linalg.norm(target.numpy(), axis=1, keepdims=True)
    q = prediction.numpy()
    q_hat = q / np.linalg.norm(q, axis=1, keepdims=True)
    along = np.sum(u * q_hat, axis=1, keepdims=True)
    expected = -2.0 * (u - along * q_hat) / np.linalg.norm(q, axis=1, keepdims=True) / 6
    np.testing.assert_allclose(gradient, expected, rtol=1e-10)


def test_config_round_trip():
    loss = BYOLLoss(reduction="sum", name="byol", dtype="float64")
    target, prediction = _views((4, 3), seed=2)

    serialized = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(serialized)

    assert serialized["registered_name"] == "Similarity>BYOLLoss"
    assert type(restored) is BYOLLoss
    assert restored.get_config() == loss.get_config()
    assert loss.get_config()["name"] == "byol" and loss.get_config()["reduction"] == "sum"
    np.testing.assert_allclose(
        restored(target, prediction).numpy(), loss(target, prediction).numpy(), rtol=1e-12
    )


def test_rejects_bad_arguments_and_inputs():
    with pytest.raises(ValueError, match="BYOLLoss: unknown reduction='max'"):
        BYOLLoss(reduction="max")
    with pytest.raises(ValueError, match="BYOLLoss expects both views to have the same shape"):
        BYOLLoss()(np.ones((4, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="BYOLLoss expects two views of shape"):
        BYOLLoss()(np.ones((4, 3, 2)), np.ones((4, 3, 2)))


def test_a_zero_prediction_row_gets_no_gradient():
    target, prediction = _views((5, 4), seed=3)
    prediction[0] = 0.0
    prediction = tf.constant(prediction)

    with tf.GradientTape() as tape:
        tape.watch(prediction)
        value = BYOLLoss(dtype="float64")(target, prediction)
    gradient = tape.gradient(value, prediction).numpy()

    # A zero row has no direction: its cosine counts as 0, its term as 2.
    others = numpy_reference.byol_terms(target[1:], prediction.numpy()[1:])
    np.testing.assert_allclose(value.numpy(), (2.0 + others.sum()) / 5, rtol=1e-12)
    assert np.all(np.isfinite(gradient)) and np.all(gradient[0] == 0.0)
    assert np.abs(gradient[1:]).max() > 1e-3
