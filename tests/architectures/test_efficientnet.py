"""EfficientNetSim: keras.applications EfficientNet upgraded to synchronised batch norm."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.architectures import EfficientNetSim
from tensorflow_similarity.distribute import GroupSyncBatchNorm
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization
from tests.architectures.step_parity import (
    SYNC_IDS,
    SYNC_VARIANTS,
    assert_step_matches_single_device,
    batch_norm_layers,
)


@pytest.mark.parametrize(
    ("sync_bn", "group_sizes"),
    [(False, set()), (True, {None}), (GroupSyncBatchNorm(2), {2})],
    ids=["plain", "sync", "group2"],
)
def test_batch_norm_layers_follow_sync_bn(sync_bn, group_sizes):
    model = EfficientNetSim((32, 32, 3), variant="b0", sync_bn=sync_bn)
    layers = batch_norm_layers(model)
    assert len(layers) == 49
    synced = [layer for layer in layers if isinstance(layer, SyncBatchNormalization)]
    assert len(synced) == (49 if group_sizes else 0)
    assert {layer.group_size for layer in synced} == group_sizes
    assert model.output_shape == (None, 128)


@pytest.mark.slow  # A step traced at 4 replicas: tens of seconds.
# Eager: tracing a 4-replica graph of the whole network costs ~75 s per setting on
# 2 cores; the compiled path runs in the ResNet-18 and BackboneSim step tests.
@pytest.mark.parametrize(("sync_bn", "group_size"), SYNC_VARIANTS, ids=SYNC_IDS)
def test_training_step_matches_single_device(sync_bn, group_size):
    assert_step_matches_single_device(
        lambda s: EfficientNetSim((32, 32, 3), embedding_size=8, sync_bn=s),
        sync_bn,
        group_size,
        compiled=False,
    )


def test_pretrained_weights_survive_the_rebuild(tmp_path):
    source = keras.applications.EfficientNetB0(
        include_top=False, weights=None, input_shape=(32, 32, 3)
    )
    path = str(tmp_path / "b0_notop.weights.h5")
    source.save_weights(path)
    model = EfficientNetSim((32, 32, 3), weights=path, sync_bn=True, trainable="partial")
    backbone = model.get_layer(source.name)
    assert all(isinstance(bn, SyncBatchNormalization) for bn in batch_norm_layers(backbone))
    assert [w.shape for w in backbone.weights] == [w.shape for w in source.weights]
    for got, want in zip(backbone.get_weights(), source.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    # With sync_bn the batch norm of the trained part stays trainable, else syncing is moot.
    for layer in backbone.layers:
        assert layer.trainable == layer.name.startswith(("block7", "top_")), layer.name

    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    path = tmp_path / "efficientnetsim.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert sum(isinstance(bn, SyncBatchNormalization) for bn in batch_norm_layers(loaded)) == 49
    np.testing.assert_array_equal(loaded(x), model(x))


def test_pretrained_weights_without_sync_freeze_batch_norm(tmp_path):
    source = keras.applications.EfficientNetB0(
        include_top=False, weights=None, input_shape=(32, 32, 3)
    )
    path = str(tmp_path / "b0_notop.weights.h5")
    source.save_weights(path)
    model = EfficientNetSim((32, 32, 3), weights=path)
    assert not any(bn.trainable for bn in batch_norm_layers(model))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"variant": "B8"}, "B0, B1, B2, B3, B4, B5, B6, B7"),
        ({"variant": "V2S"}, "variant must be one of"),
        ({"input_shape": (32, 32, 1)}, "exactly 3 input channel"),
        ({"input_shape": (32, 3)}, "rank 3"),
        ({"input_shape": (16, 16, 3)}, "at least 32x32"),
        ({"trainable": "all"}, "trainable must be one of"),
        ({"pooling": "mean"}, "pooling must be one of"),
    ],
)
def test_bad_arguments_fail_before_building(monkeypatch, kwargs, match):
    def no_building(*args, **kwargs):
        raise AssertionError("a layer was built before the arguments were checked")

    monkeypatch.setattr(keras.layers.Conv2D, "__init__", no_building)
    with pytest.raises(ValueError, match=match):
        EfficientNetSim(**{"input_shape": (32, 32, 3), "sync_bn": True, **kwargs})
