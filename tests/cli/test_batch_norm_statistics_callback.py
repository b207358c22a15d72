"""The jobs' `BatchNormStatistics` callback: recomputes at each epoch's end, skips no-BN nets."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.cli.fitting import BatchNormStatistics
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
