"""BackboneSim on a keras-cv backbone: conversion, parity with one device, weights, errors."""

from __future__ import annotations

import keras
import keras_cv
import numpy as np
import pytest

from tensorflow_similarity.architectures import BackboneSim
from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization
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
    # The caller's backbone is converted as a copy, not modified.
    assert not any(isinstance(bn, SyncBatchNormalization) for bn in batch_norm_layers(backbone))


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
