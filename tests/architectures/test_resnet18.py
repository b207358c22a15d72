"""ResNet18Sim: stems, synchronised batch norm, parity with one device, trainable modes."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.architectures import ResNet18Sim, build_resnet18
from tensorflow_similarity.distribute import GroupSyncBatchNorm, SyncBatchNormPlugin
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization
from tests.architectures.step_parity import (
    SYNC_IDS,
    SYNC_VARIANTS,
    assert_step_matches_single_device,
    batch_norm_layers,
)


@pytest.mark.parametrize("sync_bn", [False, True, GroupSyncBatchNorm(2)], ids=SYNC_IDS)
def test_batch_norm_layers_follow_sync_bn(sync_bn):
    model = ResNet18Sim((32, 32, 3), sync_bn=sync_bn)
    layers = batch_norm_layers(model)
    assert len(layers) == 20
    synced = [layer for layer in layers if isinstance(layer, SyncBatchNormalization)]
    assert len(synced) == (0 if sync_bn is False else 20)
    if isinstance(sync_bn, SyncBatchNormPlugin):
        assert {layer.group_size for layer in synced} == {2}
    elif sync_bn:
        assert {layer.group_size for layer in synced} == {None}
    assert model.output_shape == (None, 128)


@pytest.mark.slow  # A step traced at 4 replicas: tens of seconds.
@pytest.mark.parametrize(("sync_bn", "group_size"), SYNC_VARIANTS, ids=SYNC_IDS)
def test_training_step_matches_single_device(sync_bn, group_size):
    assert_step_matches_single_device(
        lambda s: ResNet18Sim((32, 32, 3), embedding_size=8, sync_bn=s), sync_bn, group_size
    )


@pytest.mark.parametrize(
    ("shape", "stem", "feature_size"),
    [((32, 32, 3), "auto", 4), ((96, 96, 3), "auto", 3), ((32, 32, 3), "imagenet", 1)],
)
def test_stem_choice(shape, stem, feature_size):
    backbone = build_resnet18(shape, stem=stem)
    assert backbone.output_shape == (None, feature_size, feature_size, 512)
    has_pool = any(layer.name == "pool1_pool" for layer in backbone.layers)
    assert has_pool == (feature_size != shape[0] // 8)
    assert backbone.get_layer("conv1_conv").kernel_size == ((3, 3) if not has_pool else (7, 7))


@pytest.mark.parametrize("width, filters", [(1.0, (64, 128, 256, 512)), (0.25, (16, 32, 64, 128))])
def test_width_multiplies_every_layers_filters(width, filters):
    backbone = build_resnet18((16, 16, 3), width=width)
    assert backbone.get_layer("conv1_conv").filters == filters[0]
    for stage, count in enumerate(filters, start=2):
        for block in (1, 2):
            for conv in (1, 2):
                layer = backbone.get_layer(f"conv{stage}_block{block}_{conv}_conv")
                assert layer.filters == count, layer.name
    assert backbone.output_shape == (None, 2, 2, filters[-1])
    # Every layer of the full-width network is there, under the same name.
    assert [layer.name for layer in backbone.layers[1:]] == [
        layer.name for layer in build_resnet18((16, 16, 3)).layers[1:]
    ]
    model = ResNet18Sim((16, 16, 3), width=width, include_top=False, pooling="avg")
    assert model.output_shape == (None, filters[-1])


def test_include_top_false_outputs_pooled_features_or_feature_map():
    pooled = ResNet18Sim((16, 16, 1), include_top=False, pooling="avg")
    assert pooled.output_shape == (None, 512)
    feature_map = ResNet18Sim((16, 16, 1), include_top=False, pooling=None)
    assert feature_map.output_shape == (None, 2, 2, 512)
    plain = ResNet18Sim((16, 16, 1), embedding_size=16, l2_norm=False, pooling="max")
    assert type(plain.get_layer("embedding")) is keras.layers.Dense


def test_trainable_modes_and_loaded_weights(tmp_path):
    partial = ResNet18Sim((16, 16, 3), trainable="partial")
    backbone = partial.get_layer("resnet18")
    for layer in backbone.layers:
        assert layer.trainable == layer.name.startswith("conv5_"), layer.name
    assert partial.get_layer("metric_embedding").trainable

    frozen = ResNet18Sim((16, 16, 3), trainable="frozen")
    assert not frozen.get_layer("resnet18").trainable
    assert len(frozen.trainable_weights) == 2  # the embedding's kernel and bias

    path = str(tmp_path / "resnet18.weights.h5")
    source = build_resnet18((16, 16, 3))
    source.save_weights(path)
    loaded = ResNet18Sim((16, 16, 3), weights=path)
    for got, want in zip(
        loaded.get_layer("resnet18").get_weights(), source.get_weights(), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    assert all(not bn.trainable for bn in batch_norm_layers(loaded))
    assert loaded.get_layer("resnet18").get_layer("conv2_block1_1_conv").trainable


def test_keras_file_round_trip_with_sync_bn(tmp_path):
    model = ResNet18Sim((16, 16, 3), sync_bn=GroupSyncBatchNorm(2))
    path = tmp_path / "resnet18sim.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    synced = [bn for bn in batch_norm_layers(loaded) if isinstance(bn, SyncBatchNormalization)]
    assert len(synced) == 20 and {bn.group_size for bn in synced} == {2}
    x = np.random.default_rng(0).uniform(size=(2, 16, 16, 3)).astype("float32")
    np.testing.assert_array_equal(loaded(x), model(x))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"input_shape": (32, 32)}, ValueError, "rank 3"),
        ({"input_shape": (32, 32, 0)}, ValueError, "at least 1 input channel"),
        ({"input_shape": (4, 4, 3)}, ValueError, "at least 8x8"),
        ({"input_shape": (16, 16, 3), "stem": "imagenet"}, ValueError, "at least 32x32"),
        ({"stem": "resnet"}, ValueError, "stem must be one of"),
        ({"trainable": "yes"}, ValueError, "trainable must be one of"),
        ({"pooling": "sum"}, ValueError, "pooling must be one of"),
        ({"pooling": None}, ValueError, "include_top=True puts the embedding"),
        ({"weights": "imagenet"}, ValueError, "no ImageNet weights"),
        ({"weights": "/no/such/file.weights.h5"}, ValueError, "existing weights file"),
        ({"sync_bn": "yes"}, TypeError, "sync_bn must be False, True"),
        ({"width": 0}, ValueError, "width must be a positive number"),
        ({"width": float("nan")}, ValueError, "width must be a positive number"),
        ({"width": "half"}, ValueError, "width must be a positive number"),
    ],
)
def test_bad_arguments_fail_before_building(monkeypatch, kwargs, error, match):
    def no_building(*args, **kwargs):
        raise AssertionError("a layer was built before the arguments were checked")

    monkeypatch.setattr(keras.layers.Conv2D, "__init__", no_building)
    kwargs = {"input_shape": (32, 32, 3), **kwargs}
    with pytest.raises(error, match=match):
        ResNet18Sim(**kwargs)


def test_weights_with_sync_bn_are_rejected(tmp_path):
    path = tmp_path / "resnet18.weights.h5"
    path.touch()
    with pytest.raises(ValueError, match="convert_sync_batchnorm"):
        ResNet18Sim((32, 32, 3), weights=str(path), sync_bn=True)
