"""ResNet-18 for similarity and self-supervised learning, with optional synchronised batch norm."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import keras

from tensorflow_similarity._validation import check_bool, is_real
from tensorflow_similarity.architectures.arguments import (
    MIN_IMAGE_SIZE,
    check_input_shape,
    check_weights,
)
from tensorflow_similarity.architectures.builder import build_similarity_model
from tensorflow_similarity.distribute.plugin import (
    SyncBatchNormPlugin,
    batch_norm_layer,
    resolve_sync_bn,
)

STEMS = ("auto", "cifar", "imagenet")
# "auto" picks the CIFAR stem up to this height/width (CIFAR, STL-sized crops, Tiny ImageNet).
_CIFAR_STEM_MAX_SIZE = 64
MIN_CIFAR_STEM_SIZE = 8
_MIN_SIZE = {"cifar": MIN_CIFAR_STEM_SIZE, "imagenet": MIN_IMAGE_SIZE}
_BN_EPSILON = 1.001e-5


def ResNet18Sim(
    input_shape: Sequence[int | None],
    embedding_size: int = 128,
    l2_norm: bool = True,
    include_top: bool = True,
    pooling: str | None = "gem",
    gem_p: float = 3.0,
    *,
    weights: str | os.PathLike | None = None,
    trainable: str = "full",
    sync_bn: bool | SyncBatchNormPlugin = False,
    stem: str = "auto",
    first_block_shortcut: bool = False,
    width: float = 1.0,
    name: str = "resnet18sim",
) -> keras.Model:
    """Builds a ResNet-18 embedding model, the usual backbone of self-supervised learning.

    The backbone is `build_resnet18()`: basic residual blocks of 64, 128, 256
    and 512 filters, two per stage (He et al., 2015), followed by the shared
    head: pooling, then `MetricEmbedding` (L2-normalised) or `Dense`. With
    `sync_bn`, its 20 batch-norm layers are `SyncBatchNormalization` layers
    made by the plugin: the setting of SimCLR, BYOL or Barlow Twins, whose
    small per-replica batches need global-batch statistics.

    Two stems (first layers), chosen by `stem`:

    * `"cifar"`: a 3x3, stride-1 convolution and no max-pool, as used for
      self-supervised learning on small images (SimCLR's CIFAR-10 ResNet,
      solo-learn, lightly): a 32x32 image keeps its resolution until the
      second stage and reaches the last one at 4x4. Images from 8x8.
    * `"imagenet"`: the original 7x7 stride-2 convolution and 3x3 stride-2
      max-pool (stride 32 overall), for images of 96x96 and more. From 32x32.
    * `"auto"` (default): `"cifar"` when the height and width are known and
      at most 64, else `"imagenet"`.

    Convolutions have no bias (each is followed by batch norm) and a He-normal
    initialisation. Inputs are not rescaled: feed images normalised as you
    train them.

    tensorflow-similarity 0.17's ResNet-18 always had the CIFAR stem and a
    1x1 convolution + batch-norm shortcut in its first block, where the
    input already has 64 channels (ours adds the identity there, as He et
    al.). `stem="cifar", first_block_shortcut=True` builds 0.17's network
    layer for layer: the same weights, in the same order, so
    `set_weights(old_model.get_weights())` moves a 0.17 model over.

    Args:
        input_shape: One image's shape, e.g. `(32, 32, 3)`.
        embedding_size: Size of the embedding. Defaults to `128`.
        l2_norm: `MetricEmbedding` if `True` (default), else `Dense`.
        include_top: Whether to add the embedding layer. Defaults to `True`.
        pooling: `"gem"` (default), `"avg"`, `"max"`, or `None` (only with
            `include_top=False`: the 4-D feature map comes out).
        gem_p: The GeM power. Defaults to `3.0`.
        weights: `None` (default, train from scratch) or the path to a weights
            file of the backbone, saved from `build_resnet18()` with the same
            stem. There are no ImageNet weights. Not with `sync_bn`.
            Keyword-only, as every argument below.
        trainable: `"full"` (default), `"partial"` (only the last stage,
            `conv5_*`, and the head train) or `"frozen"` (only the head).
            When weights are loaded, the batch-norm layers are frozen
            (inference mode) in every mode.
        sync_bn: `False` (default), `True` or a `SyncBatchNormPlugin`.
        stem: `"auto"` (default), `"cifar"` or `"imagenet"`, see above.
        first_block_shortcut: Whether the first block has a 1x1 convolution
            + batch-norm shortcut, as in 0.17. Defaults to `False`.
        width: Multiplies the number of filters of every layer (64, 128, 256
            and 512, each rounded and at least 1): `0.25` builds 16, 32, 64
            and 128 filters, with about 1/16 of the multiply-adds, for small
            data and CPUs. Defaults to `1.0`.
        name: The model's name. Defaults to `"resnet18sim"`.

    Returns:
        A `SimilarityModel` (a Keras Functional model).

    Raises:
        ValueError: For a bad argument (including weights with `sync_bn`),
            before anything is built.
        TypeError: For a `sync_bn` that is not `False`, `True` or a plugin.

    Example:

    >>> from tensorflow_similarity.architectures import ResNet18Sim
    >>> model = ResNet18Sim((32, 32, 3), sync_bn=True)
    >>> model.output_shape
    (None, 128)
    """
    return build_similarity_model(
        "ResNet18Sim",
        lambda plugin: resnet18_backbone(
            input_shape, weights, plugin, stem, "resnet18", first_block_shortcut, width
        ),
        input_shape,
        embedding_size=embedding_size,
        pretrained=weights is not None,
        trainable=trainable,
        l2_norm=l2_norm,
        include_top=include_top,
        pooling=pooling,
        gem_p=gem_p,
        sync_bn=sync_bn,
        starts_last_stage=lambda layer: layer.name.startswith("conv5_"),
        name=name,
    )


def resolve_stem(stem: str, input_shape: Sequence[int | None]) -> str:
    """Returns the stem `"auto"` stands for, given the image shape.

    Args:
        stem: `"auto"`, `"cifar"` or `"imagenet"`.
        input_shape: One image's shape.

    Returns:
        `"cifar"` or `"imagenet"`.

    Raises:
        ValueError: For an unknown `stem`.
    """
    if stem not in STEMS:
        raise ValueError(
            f"ResNet18Sim: stem must be one of {STEMS} ('cifar': 3x3 stride-1 convolution, "
            f"no max-pool; 'imagenet': 7x7 stride-2 and max-pool). Received: stem={stem!r}"
        )
    if stem != "auto":
        return stem
    channels_last = keras.config.image_data_format() == "channels_last"
    spatial = tuple(input_shape)[:2] if channels_last else tuple(input_shape)[1:]
    small = all(d is not None and d <= _CIFAR_STEM_MAX_SIZE for d in spatial)
    return "cifar" if small else "imagenet"


def build_resnet18(
    input_shape: Sequence[int | None],
    weights: str | os.PathLike | None = None,
    sync_bn: bool | SyncBatchNormPlugin = False,
    stem: str = "auto",
    name: str = "resnet18",
    *,
    first_block_shortcut: bool = False,
    width: float = 1.0,
) -> keras.Model:
    """Builds the ResNet-18 backbone.

    Each batch-norm layer is created by the plugin when `sync_bn` is set (a
    `SyncBatchNormalization` with the plugin's group size), a
    `keras.layers.BatchNormalization` otherwise. Layers are named as in
    `keras.applications` ResNets (`conv1_conv`, `conv2_block1_1_conv`, ...).

    Args:
        input_shape: One image's shape.
        weights: `None` (default) or the path to a weights file saved from
            this function with the same stem. Not with `sync_bn`.
        sync_bn: `False` (default), `True` or a `SyncBatchNormPlugin`.
        stem: `"auto"` (default), `"cifar"` or `"imagenet"`; see `ResNet18Sim`.
        name: The model's name. Defaults to `"resnet18"`.
        first_block_shortcut: Whether the first block has a 1x1 convolution
            + batch-norm shortcut (tensorflow-similarity 0.17's network).
            Defaults to `False`.
        width: Multiplies the number of filters of every layer; see
            `ResNet18Sim`. Defaults to `1.0`.

    Returns:
        A Functional model from images to the `conv5_block2_out` feature map
        (`round(512 * width)` channels; stride 8 with the CIFAR stem, 32 with
        the ImageNet one).

    Raises:
        ValueError: For a bad `input_shape`, `stem` or `weights`, or weights
            with `sync_bn`, before anything is built.
        TypeError: For a bad `sync_bn`.
    """
    return resnet18_backbone(
        input_shape, weights, resolve_sync_bn(sync_bn), stem, name, first_block_shortcut, width
    )


def build_resnet(input_shape: Sequence[int | None]) -> keras.Model:
    """Builds tensorflow-similarity 0.17's ResNet-18 backbone (its `build_resnet`).

    The same network as 0.17's, layer for layer: the CIFAR stem and a 1x1
    convolution + batch-norm shortcut in the first block, plain batch norm
    (0.17 used Keras' synchronised one; use
    `build_resnet18(..., sync_bn=True)` for that).

    Args:
        input_shape: One image's shape.

    Returns:
        `build_resnet18(input_shape, stem="cifar", first_block_shortcut=True)`.
    """
    return build_resnet18(input_shape, stem="cifar", first_block_shortcut=True)


def resnet18_backbone(
    input_shape: Sequence[int | None],
    weights: str | os.PathLike | None,
    plugin: SyncBatchNormPlugin | None,
    stem: str,
    name: str,
    first_block_shortcut: bool = False,
    width: float = 1.0,
) -> keras.Model:
    """`build_resnet18` with the plugin already resolved (`None`: plain batch norm)."""
    check_bool("first_block_shortcut", first_block_shortcut, owner="ResNet18Sim")
    if not (is_real(width) and math.isfinite(width) and width > 0):
        raise ValueError(
            "ResNet18Sim: width must be a positive number (1.0: 64 to 512 filters, 0.25: 16 "
            f"to 128). Received: width={width!r}"
        )
    shape = tuple(input_shape) if isinstance(input_shape, Sequence) else input_shape
    check_input_shape("ResNet18Sim", shape, min_size=1)
    stem = resolve_stem(stem, shape)
    check_input_shape("ResNet18Sim", shape, min_size=_MIN_SIZE[stem])
    check_weights("ResNet18Sim", weights, plugin, imagenet=False, pretrained_with_sync=False)

    def batch_norm(layer_name: str) -> keras.layers.Layer:
        return _batch_norm(plugin, layer_name)

    def block(x, filters: int, stride: int, prefix: str):
        extra_shortcut = first_block_shortcut and prefix == "conv2_block1"
        conv_shortcut = stride != 1 or x.shape[_bn_axis()] != filters or extra_shortcut
        return _block(x, filters, 3, stride, conv_shortcut, prefix, plugin)

    widths = [max(1, round(filters * width)) for filters in (64, 128, 256, 512)]
    inputs = keras.Input(shape=shape)
    if stem == "cifar":
        x = _conv(widths[0], 3, 1, "conv1_conv")(inputs)
    else:
        x = keras.layers.ZeroPadding2D(padding=((3, 3), (3, 3)), name="conv1_pad")(inputs)
        x = _conv(widths[0], 7, 2, "conv1_conv", padding="valid")(x)
    x = batch_norm("conv1_bn")(x)
    x = keras.layers.Activation("relu", name="conv1_relu")(x)
    if stem == "imagenet":
        x = keras.layers.ZeroPadding2D(padding=((1, 1), (1, 1)), name="pool1_pad")(x)
        x = keras.layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    for stage, (filters, stride) in enumerate(zip(widths, (1, 2, 2, 2), strict=True), start=2):
        x = block(x, filters, stride, f"conv{stage}_block1")
        x = block(x, filters, 1, f"conv{stage}_block2")
    model = keras.Model(inputs, x, name=name)
    if weights is not None:
        model.load_weights(os.fspath(weights))
    return model


def block0(
    x: keras.KerasTensor,
    filters: int,
    kernel_size: int = 3,
    stride: int = 1,
    conv_shortcut: bool = True,
    name: str = "",
    *,
    sync_bn: bool | SyncBatchNormPlugin = False,
) -> keras.KerasTensor:
    """0.17's ResNet-18 residual block: two convolutions and batch norms, and a shortcut.

    Layers `{name}_1_conv`, `{name}_1_bn`, `{name}_1_relu`, `{name}_2_conv`,
    `{name}_2_bn`, `{name}_add` and `{name}_out`, with a 1x1 convolution +
    batch-norm shortcut (`{name}_0_conv`, `{name}_0_bn`) when
    `conv_shortcut`. Batch norm is plain unless `sync_bn` (0.17 always used
    Keras' synchronised one); convolutions start He-normal (0.17: LeCun
    uniform).

    Args:
        x: The block's input, `[batch, h, w, c]`.
        filters: Output channels.
        kernel_size: The two convolutions' size. Defaults to 3.
        stride: The first convolution's (and the shortcut's) stride.
            Defaults to 1.
        conv_shortcut: Whether the shortcut is a 1x1 convolution (else the
            identity, which needs `stride=1` and `filters` input channels).
            Defaults to True.
        name: The layers' name prefix.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin` (keyword-only).

    Returns:
        The block's output.
    """
    return _block(x, filters, kernel_size, stride, conv_shortcut, name, resolve_sync_bn(sync_bn))


def stack0(
    x: keras.KerasTensor,
    filters: int,
    blocks: int,
    stride1: int = 2,
    name: str = "",
    *,
    sync_bn: bool | SyncBatchNormPlugin = False,
) -> keras.KerasTensor:
    """0.17's stage of `blocks` residual blocks, the first with a convolution shortcut.

    Args:
        x: The stage's input.
        filters: Output channels of each block.
        blocks: Number of blocks.
        stride1: The first block's stride. Defaults to 2.
        name: Prefix; the blocks are `{name}_block1`, `{name}_block2`, ...
        sync_bn: See `block0`.

    Returns:
        The stage's output.
    """
    x = block0(x, filters, stride=stride1, name=f"{name}_block1", sync_bn=sync_bn)
    for i in range(2, blocks + 1):
        x = block0(x, filters, conv_shortcut=False, name=f"{name}_block{i}", sync_bn=sync_bn)
    return x


def stack_fn(
    x: keras.KerasTensor, *, sync_bn: bool | SyncBatchNormPlugin = False
) -> keras.KerasTensor:
    """0.17's four ResNet-18 stages (`conv2` to `conv5`: 64, 128, 256, 512 filters, 2 blocks).

    `stack_fn` on `build_resnet`'s stem gives 0.17's network (what
    `build_resnet(input_shape)` builds whole).

    Args:
        x: The stem's output.
        sync_bn: See `block0`.

    Returns:
        The last stage's output.
    """
    x = stack0(x, 64, 2, stride1=1, name="conv2", sync_bn=sync_bn)
    x = stack0(x, 128, 2, name="conv3", sync_bn=sync_bn)
    x = stack0(x, 256, 2, name="conv4", sync_bn=sync_bn)
    return stack0(x, 512, 2, name="conv5", sync_bn=sync_bn)


def _bn_axis() -> int:
    return 3 if keras.config.image_data_format() == "channels_last" else 1


def _batch_norm(plugin: SyncBatchNormPlugin | None, name: str) -> keras.layers.Layer:
    return batch_norm_layer(plugin, axis=_bn_axis(), epsilon=_BN_EPSILON, name=name)


def _conv(filters: int, size: int, stride: int, name: str, padding: str = "same"):
    return keras.layers.Conv2D(
        filters,
        size,
        strides=stride,
        padding=padding,
        use_bias=False,
        kernel_initializer="he_normal",
        name=name,
    )


def _block(
    x: keras.KerasTensor,
    filters: int,
    kernel_size: int,
    stride: int,
    conv_shortcut: bool,
    name: str,
    plugin: SyncBatchNormPlugin | None,
) -> keras.KerasTensor:
    if conv_shortcut:
        shortcut = _conv(filters, 1, stride, f"{name}_0_conv")(x)
        shortcut = _batch_norm(plugin, f"{name}_0_bn")(shortcut)
    else:
        shortcut = x
    x = _conv(filters, kernel_size, stride, f"{name}_1_conv")(x)
    x = _batch_norm(plugin, f"{name}_1_bn")(x)
    x = keras.layers.Activation("relu", name=f"{name}_1_relu")(x)
    x = _conv(filters, kernel_size, 1, f"{name}_2_conv")(x)
    x = _batch_norm(plugin, f"{name}_2_bn")(x)
    x = keras.layers.Add(name=f"{name}_add")([shortcut, x])
    return keras.layers.Activation("relu", name=f"{name}_out")(x)
