"""BackboneSim on a keras-cv backbone: conversion, parity with one device, weights, errors."""

from __future__ import annotations

import keras
import keras_cv
import numpy as np
import pytest

from tensorflow_similarity.architectures import BackboneSim
from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization
from tensorflow_similarity.testing import mirrored_strategy
from tests.architectures.step_parity import (
    SYNC_IDS,
    SYNC_VARIANTS,
    assert_step_matches_single_device,
    batch_norm_layers,
)


def keras_cv_backbone() -> keras.Model:
    # Built from arguments, not a preset: nothing is downloaded.
    return keras_cv.models.ResNetV2Backbone(
        stackwise_filters=[8, 16],
        stackwise_blocks=[2, 2],
        stackwise_strides=[1, 2],
        include_rescaling=True,
        input_shape=(32, 32, 3),
    )


@pytest.mark.parametrize("sync_bn", [False, True, GroupSyncBatchNorm(2)], ids=SYNC_IDS)
def test_batch_norm_layers_follow_sync_bn(sync_bn):
    backbone = keras_cv_backbone()
    model = BackboneSim(backbone, sync_bn=sync_bn)
    layers = batch_norm_layers(model)
    assert len(layers) == 13
    synced = [layer for layer in layers if isinstance(layer, SyncBatchNormalization)]
    assert len(synced) == (0 if sync_bn is False else 13)
    # The caller's backbone keeps its own batch-norm layers.
    assert not any(isinstance(bn, SyncBatchNormalization) for bn in batch_norm_layers(backbone))


@pytest.mark.parametrize("share_layers", [True, False])
def test_sync_bn_shares_the_backbones_other_layers_unless_asked_to_copy(share_layers):
    backbone = keras_cv_backbone()
    model = BackboneSim(backbone, sync_bn=True, share_layers=share_layers)
    converted = model.layers[1]
    callers = {id(layer) for layer in backbone.layers}
    with_weights = [layer for layer in converted.layers if layer.weights]
    shared = [layer for layer in with_weights if id(layer) in callers]
    batch_norm = [layer for layer in with_weights if isinstance(layer, SyncBatchNormalization)]
    assert len(batch_norm) == 13
    assert len(with_weights) > len(batch_norm)
    # Shared: every layer with weights except batch norm is the caller's own.
    assert len(shared) == (len(with_weights) - len(batch_norm) if share_layers else 0)
    callers_variables = {id(variable) for variable in backbone.weights}
    shared_variables = [v for v in model.weights if id(v) in callers_variables]
    assert len(shared_variables) == (len(backbone.weights) - 4 * 13 if share_layers else 0)


def test_sharing_needs_the_backbone_built_under_the_current_strategy():
    strategy = mirrored_strategy(2)
    outside = keras_cv_backbone()
    with strategy.scope():
        with pytest.raises(ValueError, match=r"BackboneSim\(share_layers=True\).*strategy"):
            BackboneSim(outside, sync_bn=True)
        # A copy is created under the strategy: every variable is mirrored.
        model = BackboneSim(outside, sync_bn=True, share_layers=False)
    assert all(strategy.extended.variable_created_in_scope(v.value) for v in model.weights)
    with strategy.scope():
        inside = keras_cv_backbone()
        shared = BackboneSim(inside, sync_bn=True)
    assert all(strategy.extended.variable_created_in_scope(v.value) for v in shared.weights)


def test_backbone_without_batch_norm_is_used_as_is_with_a_warning():
    inputs = keras.Input((8, 8, 3))
    features = keras.layers.LayerNormalization()(keras.layers.Conv2D(4, 3)(inputs))
    backbone = keras.Model(inputs, features)
    with mirrored_strategy(2).scope():
        # Built outside the scope, but nothing is converted: no sharing check applies.
        with pytest.warns(UserWarning, match="no batch-normalisation layer"):
            model = BackboneSim(backbone, sync_bn=True, embedding_size=4)
    assert model.layers[1] is backbone


@pytest.mark.slow  # A step traced at 4 replicas: tens of seconds.
@pytest.mark.parametrize(("sync_bn", "group_size"), SYNC_VARIANTS, ids=SYNC_IDS)
def test_training_step_matches_single_device(sync_bn, group_size):
    assert_step_matches_single_device(
        lambda s: BackboneSim(keras_cv_backbone(), embedding_size=8, sync_bn=s),
        sync_bn,
        group_size,
    )


def test_weights_file_with_sync_bn_is_kept_and_round_trips(tmp_path):
    source = keras_cv_backbone()
    path = str(tmp_path / "backbone.weights.h5")
    source.save_weights(path)
    model = BackboneSim(
        keras_cv_backbone(),
        weights=path,
        sync_bn=True,
        trainable="partial",
        last_stage="v2_stack_1_block1_use_preactivation_bn",
    )
    backbone = model.layers[1]
    for got, want in zip(backbone.get_weights(), source.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    trainable = [layer.name for layer in backbone.layers if layer.trainable]
    assert trainable[0] == "v2_stack_1_block1_use_preactivation_bn"
    assert "v2_stack_0_block1_1_conv" not in trainable

    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    saved = tmp_path / "backbonesim.keras"
    model.save(saved)
    loaded = keras.saving.load_model(saved)
    assert sum(isinstance(bn, SyncBatchNormalization) for bn in batch_norm_layers(loaded)) == 13
    np.testing.assert_array_equal(loaded(x), model(x))


def test_bad_arguments():
    with pytest.raises(TypeError, match="expects a built Keras model"):
        BackboneSim(lambda x: x)
    with pytest.raises(ValueError, match="needs last_stage"):
        BackboneSim(keras_cv_backbone(), trainable="partial")
    inputs = keras.Input((8, 8, 3))
    pooled = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(inputs))
    with pytest.raises(ValueError, match="4-D feature-map"):
        BackboneSim(pooled)
    with pytest.raises(ValueError, match="rank 3"):
        BackboneSim(keras_cv_backbone(), input_shape=(32, 32))
    with pytest.raises(TypeError, match="share_layers=True"):
        BackboneSim(keras_cv_backbone(), sync_bn=True, share_layers="yes")
