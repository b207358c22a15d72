"""ResNet-50 for similarity learning, with optional synchronised batch norm."""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras

from tensorflow_similarity.architectures.arguments import (
    TRAINABLE_MODES,
    check_input_shape,
    check_weights,
)
from tensorflow_similarity.architectures.builder import build_similarity_model
from tensorflow_similarity.architectures.trainable import set_trainable
from tensorflow_similarity.distribute.plugin import (
    SyncBatchNormPlugin,
    batch_norm_layer,
    resolve_sync_bn,
)

# keras.applications.ResNet50's value, kept so that its weights give identical outputs here.
_BN_EPSILON = 1.001e-5


def ResNet50Sim(
    input_shape: Sequence[int | None],
    embedding_size: int = 128,
    weights: str | os.PathLike | None = None,
    trainable: str = "full",
    l2_norm: bool = True,
    include_top: bool = True,
    pooling: str | None = "gem",
    gem_p: float = 3.0,
    *,
    sync_bn: bool | SyncBatchNormPlugin = False,
    name: str = "resnet50sim",
) -> keras.Model:
    """Builds a ResNet-50 embedding model for similarity learning.

    The backbone is `build_resnet50()`: layer for layer
    `keras.applications.ResNet50(include_top=False)` (He et al., "Deep
    Residual Learning for Image Recognition", 2015), nested in the returned
    model, followed by the shared head: pooling, then `MetricEmbedding`
    (L2-normalised) or `Dense`. With `sync_bn`, every one of its 53 batch-norm
    layers is a `SyncBatchNormalization`, made by the plugin.

    Inputs are images preprocessed as the weights expect: for ImageNet
    weights, `keras.applications.resnet50.preprocess_input` (caffe style).

    Args:
        input_shape: One image's shape, e.g. `(224, 224, 3)`; at least 32x32.
            Height and width may be `None`.
        embedding_size: Size of the embedding. Defaults to `128`.
        weights: `None` (default, train from scratch), `"imagenet"` (the
            official Keras weights, downloaded once and cached by
            `keras.applications`) or the path to a weights file of the
            backbone (saved from `build_resnet50()` or from
            `keras.applications.ResNet50(include_top=False)`). Not with
            `sync_bn`.
        trainable: `"full"` (default, the whole backbone trains),
            `"partial"` (only the last stage, `conv5_*`, and the head train)
            or `"frozen"` (only the head trains). When pretrained weights are
            loaded, the batch-norm layers are frozen (inference mode) in every
            mode, as in the original package.
        l2_norm: Whether the embedding is `MetricEmbedding` (unit length, for
            cosine distance) rather than a plain `Dense`. Defaults to `True`.
        include_top: Whether to add the embedding layer. Defaults to `True`.
        pooling: `"gem"` (default, `GeneralizedMeanPooling2D`), `"avg"`,
            `"max"`, or `None` (only with `include_top=False`: the 4-D feature
            map comes out).
        gem_p: The GeM power (1 is average, `math.inf` max pooling). Defaults
            to `3.0`.
        sync_bn: `False` (default), `True` (sync all replicas) or a
            `SyncBatchNormPlugin` such as `GroupSyncBatchNorm(2)`.
            Keyword-only, as `name`.
        name: The model's name. Defaults to `"resnet50sim"`.

    Returns:
        A `SimilarityModel` (a Keras Functional model).

    Raises:
        ValueError: For a bad `input_shape`, `trainable`, `pooling`,
            `embedding_size`, `gem_p` or `weights`, and for pretrained weights
            with `sync_bn` (build with the weights and `sync_bn=False`, then
            `convert_sync_batchnorm(model)`, which keeps them). All raised
            before anything is built.
        TypeError: For a `sync_bn` that is not `False`, `True` or a plugin.

    Example:

    >>> from tensorflow_similarity.architectures import ResNet50Sim
    >>> model = ResNet50Sim((224, 224, 3), sync_bn=True)
    >>> model.output_shape
    (None, 128)
    """
    return build_similarity_model(
        "ResNet50Sim",
        lambda plugin: resnet50_backbone(input_shape, weights, plugin, "resnet50"),
        input_shape,
        embedding_size=embedding_size,
        pretrained=weights is not None,
        trainable=trainable,
        l2_norm=l2_norm,
        include_top=include_top,
        pooling=pooling,
        gem_p=gem_p,
        sync_bn=sync_bn,
        starts_last_stage=_starts_last_stage,
        name=name,
    )


def build_resnet50(
    input_shape: Sequence[int | None],
    weights: str | os.PathLike | None = None,
    sync_bn: bool | SyncBatchNormPlugin = False,
    name: str = "resnet50",
) -> keras.Model:
    """Builds the ResNet-50 backbone, the same layers as `keras.applications.ResNet50`.

    Layer names, weight shapes and weight order are those of
    `keras.applications.ResNet50(include_top=False, pooling=None)`, so
    `get_weights` / `set_weights` move weights between the two and give
    identical outputs. Each batch-norm layer is created by the plugin when
    `sync_bn` is set (a `SyncBatchNormalization` with the plugin's group size),
    a `keras.layers.BatchNormalization` otherwise.

    Args:
        input_shape: One image's shape, at least 32x32.
        weights: `None` (default), `"imagenet"` or a weights-file path; see
            `ResNet50Sim`. Not with `sync_bn`.
        sync_bn: `False` (default), `True` or a `SyncBatchNormPlugin`.
        name: The model's name. Defaults to `"resnet50"`.

    Returns:
        A Functional model from images to the `conv5_block3_out` feature map
        (stride 32, 2048 channels).

    Raises:
        ValueError: For a bad `input_shape` or `weights`, or pretrained
            weights with `sync_bn`, before anything is built.
        TypeError: For a bad `sync_bn`.
    """
    return resnet50_backbone(input_shape, weights, resolve_sync_bn(sync_bn), name)


def build_resnet(weights: str | os.PathLike | None = None, trainable: str = "full") -> keras.Model:
    """Builds a ResNet-50 backbone as tensorflow-similarity 0.17's `build_resnet` did.

    Any image size (`(None, None, 3)` input), `trainable` applied as in
    `ResNet50Sim`, and the batch-norm layers frozen when weights are loaded.
    Unlike 0.17, batch norm is not synchronised: use
    `build_resnet50(shape, sync_bn=True)` for that.

    Args:
        weights: `None` (default), `"imagenet"` or a weights-file path.
        trainable: `"full"` (default), `"partial"` (`conv5_*`) or `"frozen"`.

    Returns:
        The backbone, images to the `conv5_block3_out` feature map.

    Raises:
        ValueError: For a bad `weights` or `trainable`, before anything is
            built.
    """
    if trainable not in TRAINABLE_MODES:
        # 0.17's message, which its users may match.
        raise ValueError(
            f"{trainable} is not a supported option for 'trainable'. "
            f"build_resnet takes one of {', '.join(TRAINABLE_MODES)}."
        )
    backbone = build_resnet50((None, None, 3), weights)
    set_trainable(
        backbone,
        trainable,
        starts_last_stage=_starts_last_stage,
        freeze_batch_norm=weights is not None,
    )
    return backbone


def _starts_last_stage(layer: keras.layers.Layer) -> bool:
    return layer.name.startswith("conv5_")


def resnet50_backbone(
    input_shape: Sequence[int | None],
    weights: str | os.PathLike | None,
    plugin: SyncBatchNormPlugin | None,
    name: str,
) -> keras.Model:
    """`build_resnet50` with the plugin already resolved (`None`: plain batch norm)."""
    shape = check_input_shape(
        "ResNet50Sim", input_shape, channels=3 if weights == "imagenet" else None
    )
    check_weights("ResNet50Sim", weights, plugin, imagenet=True, pretrained_with_sync=False)

    bn_axis = 3 if keras.config.image_data_format() == "channels_last" else 1

    def batch_norm(layer_name: str) -> keras.layers.Layer:
        return batch_norm_layer(plugin, axis=bn_axis, epsilon=_BN_EPSILON, name=layer_name)

    def block(x, filters: int, stride: int = 1, conv_shortcut: bool = True, prefix: str = ""):
        if conv_shortcut:
            shortcut = keras.layers.Conv2D(4 * filters, 1, strides=stride, name=f"{prefix}_0_conv")(
                x
            )
            shortcut = batch_norm(f"{prefix}_0_bn")(shortcut)
        else:
            shortcut = x
        x = keras.layers.Conv2D(filters, 1, strides=stride, name=f"{prefix}_1_conv")(x)
        x = batch_norm(f"{prefix}_1_bn")(x)
        x = keras.layers.Activation("relu", name=f"{prefix}_1_relu")(x)
        x = keras.layers.Conv2D(filters, 3, padding="SAME", name=f"{prefix}_2_conv")(x)
        x = batch_norm(f"{prefix}_2_bn")(x)
        x = keras.layers.Activation("relu", name=f"{prefix}_2_relu")(x)
        x = keras.layers.Conv2D(4 * filters, 1, name=f"{prefix}_3_conv")(x)
        x = batch_norm(f"{prefix}_3_bn")(x)
        x = keras.layers.Add(name=f"{prefix}_add")([shortcut, x])
        return keras.layers.Activation("relu", name=f"{prefix}_out")(x)

    def stage(x, filters: int, blocks: int, stride: int, prefix: str):
        x = block(x, filters, stride=stride, prefix=f"{prefix}_block1")
        for i in range(2, blocks + 1):
            x = block(x, filters, conv_shortcut=False, prefix=f"{prefix}_block{i}")
        return x

    inputs = keras.Input(shape=shape)
    x = keras.layers.ZeroPadding2D(padding=((3, 3), (3, 3)), name="conv1_pad")(inputs)
    x = keras.layers.Conv2D(64, 7, strides=2, name="conv1_conv")(x)
    x = batch_norm("conv1_bn")(x)
    x = keras.layers.Activation("relu", name="conv1_relu")(x)
    x = keras.layers.ZeroPadding2D(padding=((1, 1), (1, 1)), name="pool1_pad")(x)
    x = keras.layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    x = stage(x, 64, 3, stride=1, prefix="conv2")
    x = stage(x, 128, 4, stride=2, prefix="conv3")
    x = stage(x, 256, 6, stride=2, prefix="conv4")
    x = stage(x, 512, 3, stride=2, prefix="conv5")
    model = keras.Model(inputs, x, name=name)

    if weights == "imagenet":
        # keras.applications owns the download, the cache and the file hash.
        reference = keras.applications.ResNet50(
            include_top=False, weights="imagenet", input_shape=shape
        )
        model.set_weights(reference.get_weights())
    elif weights is not None:
        model.load_weights(os.fspath(weights))
    return model
