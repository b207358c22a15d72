"""A plugin subclass changes what every entry point does: apply, create_layer, revert."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.architectures import (
    BackboneSim,
    ConvNeXtSim,
    EfficientNetSim,
    ResNet18Sim,
    ResNet50Sim,
)
from tensorflow_similarity.distribute import (
    SyncBatchNormPlugin,
    convert_sync_batchnorm,
    revert_sync_batchnorm,
)
from tensorflow_similarity.distribute.plugin import layer_kwargs
from tensorflow_similarity.layer_walk import all_layers
from tensorflow_similarity.models import ContrastiveModel, build_predictor, build_projector


class RecordingPlugin(SyncBatchNormPlugin):
    """Records every call of the two verbs the entry points must go through."""

    def __init__(self, group_size=None):
        super().__init__(group_size)
        self.applied: list[tuple[str, bool]] = []
        self.created = 0

    def apply(self, model, *, share_layers=False):
        self.applied.append((model.name, share_layers))
        return super().apply(model, share_layers=share_layers)

    def create_layer(self, **kwargs):
        self.created += 1
        return super().create_layer(**kwargs)


class KerasSyncPlugin(SyncBatchNormPlugin):
    """Another implementation: Keras' own BatchNormalization(synchronized=True)."""

    layer_class = keras.layers.BatchNormalization

    def should_convert(self, layer):
        return isinstance(layer, keras.layers.BatchNormalization) and not layer.synchronized

    def create_layer(self, **kwargs):
        kwargs.pop("group_size", None)
        kwargs["synchronized"] = True
        return keras.layers.BatchNormalization(**kwargs)

    def should_revert(self, layer):
        return isinstance(layer, keras.layers.BatchNormalization) and layer.synchronized

    def revert_layer(self, layer):
        kwargs = layer_kwargs(layer)
        kwargs["synchronized"] = False
        return keras.layers.BatchNormalization(**kwargs)


def small_cnn(name="cnn") -> keras.Model:
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, name=f"{name}_conv")(inputs)
    x = keras.layers.BatchNormalization(name=f"{name}_bn")(x)
    return keras.Model(inputs, keras.layers.ReLU()(x), name=name)


def batch_norms(model):
    return [x for x in all_layers(model) if isinstance(x, keras.layers.BatchNormalization)]


@pytest.mark.parametrize(
    "entry_point, converted",
    [
        (lambda p: EfficientNetSim((32, 32, 3), sync_bn=p), "efficientnetb0"),
        (lambda p: BackboneSim(small_cnn(), sync_bn=p), "cnn"),
        (lambda p: convert_sync_batchnorm(small_cnn(), p), "cnn"),
        (
            lambda p: ContrastiveModel(
                keras.Sequential([small_cnn("backbone"), keras.layers.GlobalAveragePooling2D()]),
                build_projector(4, "simclr", hidden_dim=8, output_dim=4),
                algorithm="simclr",
                sync_bn=p,
            ),
            "projector",
        ),
    ],
    ids=["EfficientNetSim", "BackboneSim", "convert_sync_batchnorm", "ContrastiveModel"],
)
def test_every_converting_entry_point_goes_through_apply(entry_point, converted):
    plugin = RecordingPlugin()
    model = entry_point(plugin)
    assert converted in [name for name, _ in plugin.applied]
    assert batch_norms(model)
    assert all(type(x) is plugin.layer_class for x in batch_norms(model))


def test_convnext_asks_the_plugin_too():
    plugin = RecordingPlugin()
    with pytest.warns(UserWarning, match="LayerNormalization"):
        ConvNeXtSim((32, 32, 3), sync_bn=plugin)
    assert [name for name, _ in plugin.applied] == ["convnext_tiny"]


@pytest.mark.parametrize(
    "builder, expected",
    [
        (lambda p: ResNet18Sim((8, 8, 3), sync_bn=p), 20),
        (lambda p: ResNet50Sim((32, 32, 3), sync_bn=p), 53),
        (lambda p: build_projector(4, "simsiam", hidden_dim=8, output_dim=8, sync_bn=p), 3),
        (lambda p: build_predictor(8, hidden_dim=4, sync_bn=p), 1),
    ],
    ids=["ResNet18Sim", "ResNet50Sim", "build_projector", "build_predictor"],
)
def test_native_builders_create_their_layers_with_the_plugin(builder, expected):
    plugin = RecordingPlugin()
    model = builder(plugin)
    assert plugin.created == expected == len(batch_norms(model))
    assert plugin.applied == []


def test_another_implementation_is_applied_and_reverted_by_its_own_policy():
    model = small_cnn()
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 3)).astype("float32")
    plugin = KerasSyncPlugin()
    for synced in (plugin.apply(model), convert_sync_batchnorm(model, plugin)):
        assert [x.synchronized for x in batch_norms(synced)] == [True]
        for plain in (plugin.revert(synced), revert_sync_batchnorm(synced, plugin)):
            assert [type(x) for x in batch_norms(plain)] == [keras.layers.BatchNormalization]
            assert [x.synchronized for x in batch_norms(plain)] == [False]
            np.testing.assert_array_equal(plain(x, training=False), model(x, training=False))
    # The default plugin's revert does not touch another implementation's layers.
    with pytest.warns(UserWarning, match="has no SyncBatchNormalization"):
        revert_sync_batchnorm(plugin.apply(model))
