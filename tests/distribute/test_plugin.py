"""SyncBatchNormPlugin, GroupSyncBatchNorm and resolve_sync_bn."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.distribute import (
    GroupSyncBatchNorm,
    SyncBatchNormPlugin,
    resolve_sync_bn,
)
from tensorflow_similarity.layers import SyncBatchNormalization


def test_resolve_sync_bn_accepts_false_true_and_plugins():
    assert resolve_sync_bn(False) is None
    assert resolve_sync_bn(True) == SyncBatchNormPlugin()
    assert resolve_sync_bn(True).group_size is None
    plugin = GroupSyncBatchNorm(4)
    assert resolve_sync_bn(plugin) is plugin


@pytest.mark.parametrize("value", [1, 0, "yes", None, SyncBatchNormPlugin, [True]])
def test_resolve_sync_bn_rejects_anything_else(value):
    with pytest.raises(TypeError, match="False, True or a SyncBatchNormPlugin instance"):
        resolve_sync_bn(value)


@pytest.mark.parametrize("group_size", [1, 2, 8])
def test_group_plugin_creates_grouped_layers(group_size):
    plugin = GroupSyncBatchNorm(group_size)
    layer = plugin.create_layer(axis=1, momentum=0.5, epsilon=1e-5, name="bn", synchronized=True)
    assert type(layer) is SyncBatchNormalization
    assert layer.group_size == group_size
    assert (layer.axis, layer.momentum, layer.epsilon, layer.name) == (1, 0.5, 1e-5, "bn")
    assert plugin.get_config() == {"group_size": group_size}
    assert plugin == GroupSyncBatchNorm(group_size)
    assert plugin != SyncBatchNormPlugin(group_size)
    assert repr(plugin) == f"GroupSyncBatchNorm(group_size={group_size})"


def test_default_plugin_syncs_all_replicas():
    layer = SyncBatchNormPlugin().create_layer()
    assert type(layer) is SyncBatchNormalization
    assert layer.group_size is None


@pytest.mark.parametrize("group_size", [0, -1, 2.5, True, "2"])
@pytest.mark.parametrize("plugin_class", [GroupSyncBatchNorm, SyncBatchNormPlugin])
def test_invalid_group_size_raises(plugin_class, group_size):
    with pytest.raises(ValueError, match="group_size"):
        plugin_class(group_size)


def test_group_plugin_needs_a_group_size():
    with pytest.raises(ValueError, match="SyncBatchNormPlugin"):
        GroupSyncBatchNorm(None)


def model_with_head_and_body() -> keras.Model:
    inputs = keras.Input((6,))
    x = keras.layers.Dense(6, name="body_dense")(inputs)
    x = keras.layers.BatchNormalization(name="body_bn")(x)
    # should_convert saying no to this layer means its renorm is never a problem.
    x = keras.layers.BatchNormalization(renorm=True, name="body_renorm_bn")(x)
    x = keras.layers.BatchNormalization(momentum=0.8, name="head_bn")(x)
    return keras.Model(inputs, keras.layers.Dense(2, name="head_dense")(x), name="net")


def randomize(model: keras.Model) -> None:
    rng = np.random.default_rng(0)
    for variable in model.weights:
        value = rng.uniform(0.5, 1.5, variable.shape)
        variable.assign(value.astype(variable.dtype))


def outputs(model: keras.Model, x: np.ndarray) -> np.ndarray:
    return keras.ops.convert_to_numpy(model(x, training=False))


class HeadOnly(SyncBatchNormPlugin):
    def should_convert(self, layer: keras.layers.Layer) -> bool:
        return super().should_convert(layer) and layer.name.startswith("head")


def test_subclass_should_convert_is_honoured_by_apply():
    model = model_with_head_and_body()
    randomize(model)
    synced = HeadOnly(group_size=2).apply(model)
    assert type(synced.get_layer("head_bn")) is SyncBatchNormalization
    assert synced.get_layer("head_bn").group_size == 2
    assert synced.get_layer("head_bn").momentum == 0.8
    assert type(synced.get_layer("body_bn")) is keras.layers.BatchNormalization
    assert type(synced.get_layer("body_renorm_bn")) is keras.layers.BatchNormalization
    x = np.random.default_rng(1).normal(size=(4, 6)).astype("float32")
    np.testing.assert_array_equal(outputs(synced, x), outputs(model, x))


@keras.saving.register_keras_serializable(package="SimilarityTests")
class TaggedSyncBatchNormalization(SyncBatchNormalization):
    """A user's own synchronised layer."""


class TaggedPlugin(SyncBatchNormPlugin):
    layer_class = TaggedSyncBatchNormalization


def test_subclass_layer_class_is_honoured_and_reverted():
    model = model_with_head_and_body()
    randomize(model)
    plugin = TaggedPlugin()
    with pytest.raises(ValueError, match="'net/body_renorm_bn'.*renorm"):
        plugin.apply(model)

    inputs = keras.Input((6,))
    x = keras.layers.BatchNormalization(name="bn")(inputs)
    # A plain SyncBatchNormalization is not the plugin's class, so it is replaced too.
    x = SyncBatchNormalization(group_size=1, name="sync_bn")(x)
    model = keras.Model(inputs, x)
    randomize(model)
    synced = plugin.apply(model)
    assert type(synced.get_layer("bn")) is TaggedSyncBatchNormalization
    assert type(synced.get_layer("sync_bn")) is TaggedSyncBatchNormalization
    assert synced.get_layer("sync_bn").group_size is None

    plain = plugin.revert(synced)
    assert type(plain.get_layer("bn")) is keras.layers.BatchNormalization
    assert type(plain.get_layer("sync_bn")) is keras.layers.BatchNormalization
    x = np.random.default_rng(2).normal(size=(3, 6)).astype("float32")
    np.testing.assert_array_equal(outputs(plain, x), outputs(model, x))
    np.testing.assert_array_equal(outputs(synced, x), outputs(model, x))


def test_apply_then_revert_restores_the_model():
    model = model_with_head_and_body()
    randomize(model)
    plugin = HeadOnly()
    plain = plugin.revert(plugin.apply(model))
    assert plain is not model
    for old, new in zip(model.layers, plain.layers, strict=True):
        assert type(new) is type(old)
        assert new.get_config() == old.get_config()
        for want, got in zip(old.get_weights(), new.get_weights(), strict=True):
            np.testing.assert_array_equal(got, want)
    x = np.random.default_rng(3).normal(size=(4, 6)).astype("float32")
    np.testing.assert_array_equal(outputs(plain, x), outputs(model, x))


def test_making_plugins_builds_no_layer_and_takes_no_automatic_name():
    SyncBatchNormPlugin()
    SyncBatchNormPlugin(2)
    GroupSyncBatchNorm(4)
    assert SyncBatchNormalization().name == "sync_batch_normalization"


@pytest.mark.parametrize("group_size", [0, -2, 1.5, "2", True])
def test_a_plugin_refuses_the_group_sizes_the_layer_refuses(group_size):
    message = "group_size must be None .* or a positive integer"
    with pytest.raises(ValueError, match=message):
        SyncBatchNormalization(group_size=group_size)
    with pytest.raises(ValueError, match=message):
        SyncBatchNormPlugin(group_size)
