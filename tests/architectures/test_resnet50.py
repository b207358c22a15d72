"""ResNet50Sim: same layers as keras.applications.ResNet50, synchronised batch norm, weights."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.architectures import ResNet50Sim, build_resnet50
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
    model = ResNet50Sim((32, 32, 3), sync_bn=sync_bn)
    layers = batch_norm_layers(model)
    assert len(layers) == 53
    synced = [layer for layer in layers if isinstance(layer, SyncBatchNormalization)]
    assert len(synced) == (53 if group_sizes else 0)
    assert {layer.group_size for layer in synced} == group_sizes


@pytest.mark.slow  # A step traced at 4 replicas: tens of seconds.
# Eager: tracing a 4-replica graph of the whole network costs ~75 s per setting on
# 2 cores; the compiled path runs in the ResNet-18 and BackboneSim step tests.
@pytest.mark.parametrize(("sync_bn", "group_size"), SYNC_VARIANTS, ids=SYNC_IDS)
def test_training_step_matches_single_device(sync_bn, group_size):
    assert_step_matches_single_device(
        lambda s: ResNet50Sim((32, 32, 3), embedding_size=8, sync_bn=s),
        sync_bn,
        group_size,
        compiled=False,
    )


@pytest.mark.parametrize("sync_bn", [False, True])
def test_weights_move_to_and_from_keras_applications(sync_bn):
    ours = build_resnet50((32, 32, 3), sync_bn=sync_bn)
    theirs = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(32, 32, 3))
    assert [layer.name for layer in ours.layers[1:]] == [layer.name for layer in theirs.layers[1:]]
    assert [(w.path, w.shape) for w in ours.weights] == [(w.path, w.shape) for w in theirs.weights]

    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    ours.set_weights(theirs.get_weights())
    np.testing.assert_array_equal(ours(x, training=False), theirs(x, training=False))
    other = build_resnet50((32, 32, 3), sync_bn=sync_bn)
    theirs.set_weights(other.get_weights())
    np.testing.assert_array_equal(theirs(x, training=False), other(x, training=False))


def test_weights_file_trainable_partial_and_frozen_batch_norm(tmp_path):
    source = keras.applications.ResNet50(include_top=False, weights=None, input_shape=(32, 32, 3))
    path = str(tmp_path / "resnet50_notop.weights.h5")
    source.save_weights(path)
    model = ResNet50Sim((32, 32, 3), weights=path, trainable="partial")
    backbone = model.get_layer("resnet50")
    for got, want in zip(backbone.get_weights(), source.get_weights(), strict=True):
        np.testing.assert_array_equal(got, want)
    for layer in backbone.layers:
        expected = layer.name.startswith("conv5_") and not isinstance(
            layer, keras.layers.BatchNormalization
        )
        assert layer.trainable == expected, layer.name
    assert model.get_layer("metric_embedding").trainable


@pytest.mark.parametrize("weights", ["imagenet", "file"])
@pytest.mark.parametrize("sync_bn", [True, GroupSyncBatchNorm(2)])
def test_pretrained_weights_with_sync_bn_are_rejected(monkeypatch, tmp_path, weights, sync_bn):
    if weights == "file":
        weights = str(tmp_path / "resnet50.weights.h5")
        open(weights, "wb").close()

    def no_building(*args, **kwargs):
        raise AssertionError("a layer was built before the arguments were checked")

    monkeypatch.setattr(keras.layers.Conv2D, "__init__", no_building)
    with pytest.raises(ValueError, match="train from scratch.*convert_sync_batchnorm"):
        ResNet50Sim((224, 224, 3), weights=weights, sync_bn=sync_bn)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"input_shape": (224, 224, 3, 1)}, "rank 3"),
        ({"input_shape": (16, 16, 3)}, "at least 32x32"),
        ({"input_shape": (224, 224, 1), "weights": "imagenet"}, "exactly 3 input channel"),
        ({"trainable": "partly"}, "trainable must be one of"),
        ({"pooling": "GeM"}, "pooling must be one of"),
        ({"embedding_size": 0}, "embedding_size must be a positive integer"),
        ({"gem_p": float("nan")}, "gem_p must be a real number"),
    ],
)
def test_bad_arguments_fail_before_building(monkeypatch, kwargs, match):
    def no_building(*args, **kwargs):
        raise AssertionError("a layer was built before the arguments were checked")

    monkeypatch.setattr(keras.layers.Conv2D, "__init__", no_building)
    with pytest.raises(ValueError, match=match):
        ResNet50Sim(**{"input_shape": (224, 224, 3), **kwargs})


def test_keras_file_round_trip_with_sync_bn(tmp_path):
    model = ResNet50Sim((32, 32, 3), sync_bn=True, pooling="max")
    path = tmp_path / "resnet50sim.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert sum(isinstance(bn, SyncBatchNormalization) for bn in batch_norm_layers(loaded)) == 53
    x = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(loaded(x), model(x))
