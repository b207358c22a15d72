"""`BatchNormStatistics`: recomputes at each epoch's end, skips networks without batch norm."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.callbacks import BatchNormStatistics
from tensorflow_similarity.cli.fitting import EvaluationSchedule
from tensorflow_similarity.layers import recompute_batch_norm_statistics


def _network(with_batch_norm: bool) -> keras.Model:
    keras.utils.set_random_seed(0)
    layers = [keras.Input((3,)), keras.layers.Dense(4)]
    if with_batch_norm:
        layers.append(keras.layers.BatchNormalization())
    return keras.Sequential(layers)


def test_fit_ends_each_epoch_with_the_images_statistics():
    network = _network(True)
    network.compile(optimizer="sgd", loss="mse")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)), rng.normal(size=(32, 4))
    clean = rng.normal(2.0, 3.0, size=(20, 3)).astype("float32")

    network.fit(
        x, y, epochs=2, batch_size=8, verbose=0, callbacks=[BatchNormStatistics(network, clean)]
    )
    after_fit = [np.copy(w) for w in network.layers[-1].non_trainable_weights]
    recompute_batch_norm_statistics(network, clean)

    for fitted, recomputed in zip(after_fit, network.layers[-1].non_trainable_weights, strict=True):
        np.testing.assert_allclose(fitted, recomputed, rtol=1e-6)
    # Keras' own moving averages after 8 steps would still be near (0, 1); these are the
    # statistics of `clean` through the dense layer.
    assert not np.allclose(after_fit[1], 1.0, atol=0.5)


def test_a_network_without_batch_norm_is_left_alone():
    network = _network(False)
    weights = [np.copy(w) for w in network.get_weights()]
    callback = BatchNormStatistics(network, np.ones((4, 3), "float32"))
    callback.on_epoch_end(0)
    assert not callback.active
    for before, after in zip(weights, network.get_weights(), strict=True):
        np.testing.assert_array_equal(before, after)


def test_statistics_recomputed_every_n_epochs_end_with_the_same_model():
    # Training reads batch statistics, not the moving ones, and the last epoch is always
    # recomputed: evaluating every 3rd epoch ends with the weights of evaluating every epoch.
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(32, 3)), rng.normal(size=(32, 4))
    clean = rng.normal(2.0, 3.0, size=(20, 3)).astype("float32")
    weights = {}
    for every in (1, 3):
        network = _network(True)
        network.compile(optimizer="sgd", loss="mse")
        schedule = EvaluationSchedule([BatchNormStatistics(network, clean)], every, 5)
        network.fit(x, y, epochs=5, batch_size=8, shuffle=False, verbose=0, callbacks=[schedule])
        weights[every] = network.get_weights()
    for reference, scheduled in zip(weights[1], weights[3], strict=True):
        np.testing.assert_allclose(scheduled, reference, rtol=1e-6, atol=1e-7)
    # The moving statistics are those of `clean`, not Keras' averages.
    assert not np.allclose(weights[3][-1], 1.0, atol=0.5)
