"""assert_layer_parity: a layer that depends on its replica's rows alone is told apart."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.testing import assert_layer_parity


def _built(layer, shape):
    layer.build(shape)
    return layer


def _dense():
    layer = _built(keras.layers.Dense(3, kernel_initializer="ones"), (None, 4))
    layer.kernel.assign(np.arange(12.0, dtype="float32").reshape(4, 3) / 10.0)
    return layer


X = np.random.default_rng(0).normal(2.0, 1.0, size=(7, 4)).astype("float32")


def test_a_row_wise_layer_matches_one_device_on_unequal_and_empty_parts():
    parity = assert_layer_parity(_dense, X, [0, 2, 5], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(parity.outputs, X @ _dense().kernel.numpy(), rtol=1e-6)
    # The kernel's gradient adds up over the replicas: the one-device gradient.
    assert [g.shape for g in parity.gradients] == [(7, 4), (4, 3), (3,)]
    assert parity.sizes == (0, 2, 5)


def test_batch_statistics_of_each_replica_alone_fail_the_check():
    def plain():
        return _built(keras.layers.BatchNormalization(momentum=0.5), (None, 4))

    with pytest.raises(AssertionError, match=r"outputs on 2 replicas holding \[2, 5\] rows"):
        assert_layer_parity(plain, X, [2, 5])


def test_moving_statistics_are_compared_after_the_step():
    def frozen_output():
        # Outputs use the moving statistics (as in inference); only the update differs.
        layer = _built(keras.layers.BatchNormalization(momentum=0.5), (None, 4))
        original = layer.call
        layer.call = lambda x, training=None, mask=None: original(x, training=training) * 0.0 + x
        return layer

    with pytest.raises(AssertionError, match="moving_mean after the step"):
        assert_layer_parity(frozen_output, X, [2, 5])


def test_layers_whose_weights_do_not_correspond_are_rejected():
    with pytest.raises(ValueError, match="trainable weights"):
        assert_layer_parity(
            _dense,
            X,
            [3, 4],
            reference_factory=lambda: _built(keras.layers.Dense(3, use_bias=False), (None, 4)),
        )
