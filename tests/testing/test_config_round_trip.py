"""assert_config_round_trip: an incomplete get_config is named, a complete one passes."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.augmenters import ViewAugmenter
from tensorflow_similarity.layers import GeneralizedMeanPooling1D, SyncBatchNormalization
from tensorflow_similarity.losses import XBM, MultiSimilarityLoss, TripletLoss
from tensorflow_similarity.testing import assert_config_round_trip


class _Scaled(keras.layers.Layer):
    """A layer whose get_config forgets `factor` when `forget` is set."""

    def __init__(self, factor=1.0, forget=False, **kwargs):
        super().__init__(**kwargs)
        self.factor, self.forget = factor, forget

    def call(self, x):
        return x * self.factor

    def get_config(self):
        config = {**super().get_config(), "forget": self.forget}
        return config if self.forget else {**config, "factor": self.factor}


class _Hidden(keras.layers.Layer):
    """A setting held where no attribute shows it: only the call can tell."""

    def __init__(self, offset=0.0, **kwargs):
        super().__init__(**kwargs)
        self._offset = np.array([offset])

    def call(self, x):
        return x + self._offset


def test_a_layer_rebuilt_with_a_default_setting_is_named():
    with pytest.raises(AssertionError, match=r"_Scaled rebuilt .* factor=1.0, not 3.0"):
        assert_config_round_trip(_Scaled(3.0, forget=True))
    assert isinstance(assert_config_round_trip(_Scaled(3.0)), _Scaled)


def test_a_setting_only_the_call_reveals_is_caught_by_calling_both():
    layer = _Hidden(offset=0.0)
    layer._offset = np.array([1.0])  # not in the config, and an array: no plain setting
    assert_config_round_trip(layer)
    with pytest.raises(AssertionError, match="called"):
        assert_config_round_trip(layer, np.ones((2, 3), "float32"))


def test_layers_losses_models_and_augmenters_round_trip():
    x = np.random.default_rng(0).normal(size=(4, 5, 3)).astype("float32")
    assert_config_round_trip(SyncBatchNormalization(momentum=0.5, group_size=2), x, training=True)
    assert_config_round_trip(GeneralizedMeanPooling1D(p=2.0), np.abs(x))
    labels, embeddings = np.array([0, 0, 1, 1]), x[:, 0]
    assert_config_round_trip(TripletLoss(margin=0.3, distance="l2"), labels, embeddings)
    assert_config_round_trip(XBM(MultiSimilarityLoss(alpha=3.0), memory_size=8))
    inputs = keras.Input((5, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(SyncBatchNormalization()(inputs)))
    assert_config_round_trip(model, x)
    images = np.random.default_rng(1).uniform(size=(2, 16, 16, 3)).astype("float32")
    assert_config_round_trip(ViewAugmenter(image_size=8, seed=3), images, step=0)


def test_an_object_without_a_config_is_rejected():
    with pytest.raises(TypeError, match="needs an object with get_config"):
        assert_config_round_trip(object())
