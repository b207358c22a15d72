"""ArcFaceLoss against a float64 NumPy loop, and its CosineClassifier head."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.layers import CosineClassifier
from tensorflow_similarity.losses import ArcFaceLoss
from tests.losses import metric_reference


@pytest.mark.parametrize(("margin", "scale"), [(0.5, 64.0), (0.2, 8.0), (1.2, 4.0)])
def test_matches_reference(margin, scale):
    rng = np.random.default_rng(10)
    cosines = np.tanh(rng.normal(size=(7, 5)))
    cosines[0, 2] = -0.99  # theta + m > pi for the larger margins
    labels = np.array([2, 0, 1, 4, 3, 2, 0])

    terms = ArcFaceLoss(margin, scale, reduction="none", dtype="float64")(labels, cosines)

    expected = metric_reference.arcface_terms(labels, cosines, margin, scale)
    np.testing.assert_allclose(terms.numpy(), expected, rtol=1e-9)


def test_head_outputs_cosines_and_trains_its_centres_under_fit():
    rng = np.random.default_rng(11)
    x, labels = rng.normal(size=(12, 6)).astype("float32"), rng.integers(0, 3, size=12)
    head = CosineClassifier(3, name="centres")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4), head])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=ArcFaceLoss(scale=8.0))
    before = head.kernel.numpy().copy()

    out = model(x).numpy()
    model.fit(x, labels, batch_size=12, epochs=1, verbose=0)

    assert out.shape == (12, 3) and np.all(np.abs(out) <= 1.0 + 1e-6)
    assert np.abs(head.kernel.numpy() - before).max() > 1e-4


def test_gradients_are_finite_at_cosine_one():
    cosines = tf.constant([[1.0, 0.0], [0.0, -1.0]])
    with tf.GradientTape() as tape:
        tape.watch(cosines)
        value = ArcFaceLoss()(np.array([0, 1]), cosines)
    assert np.isfinite(value.numpy()) and np.all(np.isfinite(tape.gradient(value, cosines)))


def test_config_round_trips():
    loss = ArcFaceLoss(margin=0.3, scale=30.0, name="arc")
    head = CosineClassifier(7, kernel_initializer="zeros", name="h")

    assert type(ArcFaceLoss.from_config(loss.get_config())) is ArcFaceLoss
    assert ArcFaceLoss.from_config(loss.get_config()).get_config() == loss.get_config()
    assert CosineClassifier.from_config(head.get_config()).get_config() == head.get_config()
    with pytest.raises(ValueError, match="margin must be a finite number in"):
        ArcFaceLoss(margin=2.0)
