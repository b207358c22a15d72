"""keras-hub backbones: sync-BN conversion, 4-replica step parity, and blocks it cannot reach."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
import pytest

from tensorflow_similarity.architectures import BackboneSim
from tensorflow_similarity.distribute import (
    GroupSyncBatchNorm,
    convert_sync_batchnorm,
    revert_sync_batchnorm,
)
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization
from tests.architectures.step_parity import (
    SYNC_IDS,
    SYNC_VARIANTS,
    assert_step_matches_single_device,
    batch_norm_layers,
)

# Every backbone is built from arguments, never from a preset: nothing is downloaded.


def resnet(pre_activation: bool = False) -> keras.Model:
    # keras-hub requires 64 filters in the stem and the first stack of basic blocks.
    return keras_hub.models.ResNetBackbone(
        input_conv_filters=[64],
        input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 16],
        stackwise_num_blocks=[1, 1],
        stackwise_num_strides=[1, 2],
        block_type="basic_block",
        use_pre_activation=pre_activation,
        image_shape=(32, 32, 3),
    )


def efficientnet(block_types: tuple[str, str] = ("v1", "v1")) -> keras.Model:
    # "v1" blocks are Functional; "fused" and "unfused" (EfficientNetV2) are subclassed layers.
    return keras_hub.models.EfficientNetBackbone(
        stackwise_width_coefficients=[1.0, 1.0],
        stackwise_depth_coefficients=[1.0, 1.0],
        stackwise_kernel_sizes=[3, 3],
        stackwise_num_repeats=[1, 2],
        stackwise_input_filters=[8, 8],
        stackwise_output_filters=[8, 16],
        stackwise_expansion_ratios=[1, 2],
        stackwise_squeeze_and_excite_ratios=[0.25, 0.25],
        stackwise_strides=[1, 2],
        stackwise_block_types=list(block_types),
        stackwise_force_input_filters=[0, 0],
        stackwise_nores_option=[False, False],
        num_features=32,
        input_shape=(32, 32, 3),
    )


def mobilenet() -> keras.Model:
    return keras_hub.models.MobileNetBackbone(
        stackwise_expansion=[[16], [24]],
        stackwise_num_blocks=[1, 1],
        stackwise_num_filters=[[8], [16]],
        stackwise_kernel_size=[[3], [3]],
        stackwise_num_strides=[[2], [1]],
        stackwise_se_ratio=[[None], [0.25]],
        stackwise_activation=[["relu"], ["hard_swish"]],
        stackwise_padding=[[1], [1]],
        output_num_filters=None,
        depthwise_filters=8,
        depthwise_stride=1,
        depthwise_residual=False,
        last_layer_filter=32,
        input_num_filters=8,
        image_shape=(32, 32, 3),
    )


FUNCTIONAL = {
    "resnet": resnet,
    # Pre-activation ResNet (V2) pads with keras.ops.pad: an operation in the graph, no layer.
    "resnet_v2": lambda: resnet(pre_activation=True),
    "efficientnet": efficientnet,
}
SUBCLASSED = {
    "efficientnet_v2": lambda: efficientnet(("fused", "unfused")),
    "mobilenet": mobilenet,
}


def direct_batch_norm_layers(backbone: keras.Model) -> list[keras.layers.BatchNormalization]:
    return [
        layer for layer in backbone.layers if isinstance(layer, keras.layers.BatchNormalization)
    ]


@pytest.mark.parametrize("family", FUNCTIONAL)
def test_functional_backbones_convert_and_revert_with_the_same_outputs(family):
    backbone = FUNCTIONAL[family]()
    expected = direct_batch_norm_layers(backbone)
    assert len(expected) >= 5
    converted = convert_sync_batchnorm(backbone, GroupSyncBatchNorm(2))
    synced = batch_norm_layers(converted)
    assert [type(layer) for layer in synced] == [SyncBatchNormalization] * len(expected)
    assert [layer.name for layer in synced] == [layer.name for layer in expected]
    assert {layer.group_size for layer in synced} == {2}
    reverted = revert_sync_batchnorm(converted)
    assert [type(layer) for layer in batch_norm_layers(reverted)] == [
        keras.layers.BatchNormalization
    ] * len(expected)

    x = np.random.default_rng(0).uniform(-1.0, 1.0, (2, 32, 32, 3)).astype("float32")
    want = keras.ops.convert_to_numpy(backbone(x))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(converted(x)), want)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(reverted(x)), want)
    for got, weight in zip(converted.get_weights(), backbone.get_weights(), strict=True):
        np.testing.assert_array_equal(got, weight)


# Every sync variant on ResNet and EfficientNet; the pre-activation ResNet, which differs
# only by its padding operation, once.
PARITY_CASES = [
    pytest.param(family, sync_bn, group_size, id=f"{family}-{variant}")
    for family in ("resnet", "efficientnet")
    for (sync_bn, group_size), variant in zip(SYNC_VARIANTS, SYNC_IDS, strict=True)
] + [pytest.param("resnet_v2", *SYNC_VARIANTS[1], id="resnet_v2-sync")]


@pytest.mark.slow  # A step traced at 4 replicas: tens of seconds.
@pytest.mark.parametrize(("family", "sync_bn", "group_size"), PARITY_CASES)
def test_training_step_matches_single_device(family, sync_bn, group_size):
    # Eager: tracing the step of every replica would take three times as long on 2 cores.
    assert_step_matches_single_device(
        lambda s: BackboneSim(FUNCTIONAL[family](), embedding_size=8, sync_bn=s),
        sync_bn,
        group_size,
        compiled=False,
    )


def test_sync_bn_off_uses_the_keras_hub_backbone_itself():
    backbone = resnet()
    model = BackboneSim(backbone, embedding_size=8)
    assert model.layers[1] is backbone
    assert model.output_shape == (None, 8)


def test_converted_model_round_trips_through_keras_format(tmp_path):
    model = BackboneSim(resnet(pre_activation=True), embedding_size=8, sync_bn=True)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert len(batch_norm_layers(loaded)) == len(batch_norm_layers(model))
    assert all(isinstance(bn, SyncBatchNormalization) for bn in batch_norm_layers(loaded))
    x = np.random.default_rng(1).uniform(0.0, 255.0, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(loaded(x), model(x))


def unreachable_paths(backbone: keras.Model) -> list[str]:
    # From the variables' own paths (block/bn/moving_mean), not from the package's layer walker.
    direct = {layer.name for layer in direct_batch_norm_layers(backbone)}
    layer_paths = [
        variable.path.rsplit("/", 1)[0]
        for variable in backbone.weights
        if variable.path.endswith("/moving_mean")
    ]
    return [f"{backbone.name}/{path}" for path in layer_paths if path not in direct]


@pytest.mark.parametrize("sync_bn", [True, GroupSyncBatchNorm(2)], ids=["sync", "group2"])
@pytest.mark.parametrize("family", SUBCLASSED)
def test_batch_norm_inside_subclassed_blocks_is_an_error_naming_every_path(family, sync_bn):
    backbone = SUBCLASSED[family]()
    paths = unreachable_paths(backbone)
    assert len(paths) >= 5
    # The stem's batch norm is reachable and is not named.
    assert direct_batch_norm_layers(backbone)
    with pytest.raises(ValueError, match="cannot reach") as error:
        BackboneSim(backbone, embedding_size=8, sync_bn=sync_bn)
    message = str(error.value)
    named = [path for path in message.split("'") if "/" in path]
    assert named == paths
    assert "Functional API" in message
    with pytest.raises(ValueError, match="cannot reach"):
        convert_sync_batchnorm(backbone)
    # Without sync the same backbone works, each replica normalising its own share.
    assert BackboneSim(backbone, embedding_size=8).output_shape == (None, 8)
