"""What every architecture builder shares: argument checks, trainable policy and the head.

All builders take `input_shape, embedding_size, weights, trainable, l2_norm,
include_top, pooling, gem_p, sync_bn`. The checks here run before any layer is
built, so a bad argument fails fast with a message naming the fix.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from numbers import Real

import keras
import tensorflow as tf

from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin, resolve_sync_bn
from tensorflow_similarity.distribute.rebuild import all_layers
from tensorflow_similarity.layers.gem_pooling import GeneralizedMeanPooling2D
from tensorflow_similarity.layers.metric_embedding import MetricEmbedding

TRAINABLE_MODES = ("full", "partial", "frozen")
POOLING_MODES = ("gem", "avg", "max", None)
# Smallest height and width a builder accepts unless it says otherwise.
MIN_IMAGE_SIZE = 32


def check_input_shape(
    builder: str,
    input_shape: Sequence[int | None],
    *,
    min_size: int = MIN_IMAGE_SIZE,
    channels: int | None = None,
) -> tuple[int | None, ...]:
    """Checks an image shape `(H, W, C)` (or `(C, H, W)` when channels-first).

    Args:
        builder: Name of the calling builder, for the error message.
        input_shape: The shape without the batch axis.
        min_size: Smallest accepted height and width (unknown ones pass).
        channels: The exact number of channels required, or `None` for any
            positive number.

    Returns:
        The shape as a tuple.

    Raises:
        ValueError: If the shape is not of rank 3, its channel count is
            unknown, not positive or not `channels`, or a known spatial size is
            below `min_size`.
    """
    try:
        shape = tuple(input_shape)
    except TypeError:
        shape = None
    if shape is None or len(shape) != 3:
        raise ValueError(
            f"{builder} expects input_shape to be one image's shape (height, width, channels), "
            f"rank 3 without the batch axis, e.g. (224, 224, 3). Received: {input_shape!r}"
        )
    channels_last = keras.config.image_data_format() == "channels_last"
    num_channels = shape[-1] if channels_last else shape[0]
    spatial = shape[:2] if channels_last else shape[1:]
    for dim in shape:
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            raise ValueError(
                f"{builder} expects integer (or None) dimensions in input_shape. "
                f"Received: {input_shape!r}"
            )
    if num_channels is None or num_channels < 1 or (channels and num_channels != channels):
        wanted = f"exactly {channels}" if channels else "at least 1"
        raise ValueError(
            f"{builder} needs {wanted} input channel(s) (the "
            f"{'last' if channels_last else 'first'} axis of input_shape, image data format "
            f"{keras.config.image_data_format()!r}). Received: input_shape={shape!r}"
        )
    if any(d is not None and d < min_size for d in spatial):
        raise ValueError(
            f"{builder} needs images of at least {min_size}x{min_size} pixels. "
            f"Received: input_shape={shape!r}. Resize the images up, or use a builder for "
            "smaller inputs (ResNet18Sim with stem='cifar' takes 8x8 and more)."
        )
    return shape


def check_builder_args(
    builder: str,
    *,
    embedding_size: int,
    trainable: str,
    l2_norm: bool,
    include_top: bool,
    pooling: str | None,
    gem_p: float,
    sync_bn: bool | SyncBatchNormPlugin,
) -> SyncBatchNormPlugin | None:
    """Checks the head, trainable and `sync_bn` arguments shared by every builder.

    Args:
        builder: Name of the calling builder, for the error messages.
        embedding_size: Output size of the embedding layer.
        trainable: One of `TRAINABLE_MODES`.
        l2_norm: Whether the embedding is L2-normalised.
        include_top: Whether the embedding layer is added.
        pooling: One of `POOLING_MODES`.
        gem_p: The GeM power, used when `pooling="gem"`.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`.

    Returns:
        The sync-BN plugin, or `None` for plain batch norm.

    Raises:
        ValueError: For an unknown `trainable` or `pooling`, `include_top=True`
            without pooling, a non-positive `embedding_size` or a bad `gem_p`.
        TypeError: For a `sync_bn` that is not `False`, `True` or a plugin, or
            non-boolean `l2_norm` / `include_top`.
    """
    plugin = resolve_sync_bn(sync_bn)
    if trainable not in TRAINABLE_MODES:
        raise ValueError(
            f"{builder}: trainable must be one of {TRAINABLE_MODES} ('full': the whole "
            "backbone trains, 'partial': only its last stage, 'frozen': none of it; the head "
            f"always trains). Received: trainable={trainable!r}"
        )
    if pooling not in POOLING_MODES:
        raise ValueError(
            f"{builder}: pooling must be one of {POOLING_MODES} ('gem': generalised mean, "
            "'avg', 'max', None: no pooling, the 4-D feature map). "
            f"Received: pooling={pooling!r}"
        )
    for flag, value in (("l2_norm", l2_norm), ("include_top", include_top)):
        if not isinstance(value, bool):
            raise TypeError(f"{builder}: {flag} must be True or False. Received: {value!r}")
    if include_top and pooling is None:
        raise ValueError(
            f"{builder}: include_top=True puts the embedding on pooled features, so it needs "
            "pooling='gem', 'avg' or 'max'. For the 4-D feature map use include_top=False, "
            "pooling=None."
        )
    if include_top and (
        isinstance(embedding_size, bool)
        or not isinstance(embedding_size, int)
        or embedding_size < 1
    ):
        raise ValueError(
            f"{builder}: embedding_size must be a positive integer. "
            f"Received: embedding_size={embedding_size!r}"
        )
    if pooling == "gem" and (
        isinstance(gem_p, bool) or not isinstance(gem_p, Real) or math.isnan(gem_p)
    ):
        raise ValueError(
            f"{builder}: gem_p must be a real number (1.0 is average pooling, math.inf max "
            f"pooling). Received: gem_p={gem_p!r}"
        )
    return plugin


def check_weights(
    builder: str,
    weights: str | os.PathLike | None,
    plugin: SyncBatchNormPlugin | None,
    *,
    imagenet: bool,
    pretrained_with_sync: bool,
) -> None:
    """Checks the `weights` argument against what the builder supports.

    Args:
        builder: Name of the calling builder, for the error messages.
        weights: `None`, `"imagenet"` or a path to a weights file.
        plugin: The resolved sync-BN plugin, or `None`.
        imagenet: Whether the builder has ImageNet weights.
        pretrained_with_sync: Whether the builder may load weights into a
            model with synchronised batch norm (the application builders,
            whose rebuild keeps weights).

    Raises:
        ValueError: If `weights` is neither `None`, a supported `"imagenet"`
            nor an existing file, or if pretrained weights come with `sync_bn`
            in a builder that trains synced models from scratch.
    """
    if weights is None:
        return
    is_imagenet = isinstance(weights, str) and weights == "imagenet"
    if is_imagenet and not imagenet:
        raise ValueError(
            f"{builder} has no ImageNet weights. Use weights=None (train from scratch) or "
            "the path to a weights file."
        )
    if not is_imagenet:
        if not isinstance(weights, str | os.PathLike) or not tf.io.gfile.exists(os.fspath(weights)):
            accepted = "None, 'imagenet' or" if imagenet else "None or"
            raise ValueError(
                f"{builder}: weights must be {accepted} the path to an existing weights file. "
                f"Received: weights={weights!r}"
            )
    if plugin is not None and not pretrained_with_sync:
        raise ValueError(
            f"{builder} builds synchronised batch norm (sync_bn) only to train from scratch, "
            f"with weights=None. Received: weights={weights!r}. To start from pretrained "
            f"weights, build {builder}(..., weights={weights!r}, sync_bn=False), then call "
            "tensorflow_similarity.distribute.convert_sync_batchnorm(model), which keeps the "
            "weights."
        )


def synchronise(
    builder: str,
    backbone: keras.Model,
    plugin: SyncBatchNormPlugin | None,
    *,
    share_layers: bool = False,
) -> keras.Model:
    """Upgrades a built backbone's batch-norm layers with the plugin, keeping its weights.

    Warns instead when the backbone has no layer the plugin converts (ConvNeXt
    normalises with LayerNormalization), rather than pretending to sync.

    Args:
        builder: Name of the calling builder, for the warning.
        backbone: A Functional or Sequential model.
        plugin: The sync-BN plugin, or `None` (the backbone is returned as is).
        share_layers: Whether the result reuses the layers and variables of
            `backbone` other than batch norm (`convert_sync_batchnorm(...,
            share_layers=True)`), which costs a fraction of a copy: for a
            builder's own temporary, or a caller's backbone the result is
            meant to be built on. Defaults to `False`: a copy, leaving
            `backbone` as it is.

    Returns:
        The converted backbone, or `backbone` when there is nothing to convert.
    """
    if plugin is None:
        return backbone
    return plugin.apply(backbone, share_layers=share_layers)


def check_variant(builder: str, variant: str, variants: Sequence[str]) -> str:
    """Returns the canonical name of a builder's variant, or raises listing the valid ones.

    Args:
        builder: Name of the calling builder, for the message.
        variant: A variant name, case-insensitive.
        variants: The canonical names.

    Returns:
        The name in `variants` that equals `variant` but for case.

    Raises:
        ValueError: For an unknown variant, listing the valid ones.
    """
    by_folded_name = {name.casefold(): name for name in variants}
    name = by_folded_name.get(variant.casefold()) if isinstance(variant, str) else None
    if name is None:
        raise ValueError(
            f"{builder}: variant must be one of {', '.join(variants)} "
            f"(case-insensitive). Received: variant={variant!r}"
        )
    return name


def build_application(
    builder: str,
    application: str,
    input_shape: Sequence[int | None],
    weights: str | os.PathLike | None,
    plugin: SyncBatchNormPlugin | None,
) -> keras.Model:
    """Builds `keras.applications.<application>(include_top=False)`, synchronised by `plugin`.

    The input shape and weights are checked before anything is built. The
    application is the builder's own temporary, so the conversion reuses its
    layers other than batch norm (`share_layers=True`) in place of copying
    them, which makes the rebuild a fraction of the construction.

    Args:
        builder: Name of the calling builder, for messages.
        application: Name of the `keras.applications` function.
        input_shape: One RGB image's shape.
        weights: `None`, `"imagenet"` or a weights-file path (kept by the
            conversion).
        plugin: The sync-BN plugin, or `None` for plain batch norm.

    Returns:
        The backbone.

    Raises:
        ValueError: For a bad `input_shape` or `weights`.
    """
    shape = check_input_shape(builder, input_shape, channels=3)
    check_weights(builder, weights, plugin, imagenet=True, pretrained_with_sync=True)
    backbone = getattr(keras.applications, application)(
        include_top=False,
        weights=os.fspath(weights) if weights is not None else None,
        input_shape=shape,
    )
    return synchronise(builder, backbone, plugin, share_layers=True)


def set_trainable(
    backbone: keras.Model,
    trainable: str,
    *,
    starts_last_stage: Callable[[keras.layers.Layer], bool] | None,
    freeze_batch_norm: bool,
) -> None:
    """Applies the `trainable` mode to a backbone, in place.

    Args:
        backbone: The backbone model.
        trainable: `"full"` (every layer trains), `"partial"` (the layers
            from the first one matching `starts_last_stage` on, in
            `backbone.layers` order) or `"frozen"` (none).
        starts_last_stage: Predicate marking the first layer of the last
            stage; required for `"partial"`.
        freeze_batch_norm: Whether every batch-norm layer is set
            `trainable=False` (inference mode: pretrained moving statistics
            are used and kept), as the original package did for pretrained
            backbones.

    Raises:
        ValueError: For `"partial"` when no layer matches `starts_last_stage`.
    """
    backbone.trainable = trainable != "frozen"
    if trainable == "partial":
        in_tail = False
        for layer in backbone.layers:
            in_tail = in_tail or bool(starts_last_stage and starts_last_stage(layer))
            layer.trainable = in_tail
        if not in_tail:
            raise ValueError(
                f"trainable='partial' found no last stage in backbone {backbone.name!r}: "
                "no layer matched its first layer."
            )
    if freeze_batch_norm:
        for layer in all_layers(backbone):
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False


def similarity_model(
    backbone: keras.Model,
    input_shape: Sequence[int | None],
    *,
    embedding_size: int,
    l2_norm: bool,
    include_top: bool,
    pooling: str | None,
    gem_p: float,
    name: str,
) -> keras.Model:
    """Wraps a backbone with the shared pooling and embedding head.

    Args:
        backbone: A model mapping images to a 4-D feature map.
        input_shape: The image shape of the new model's input.
        embedding_size: Output size of the embedding layer.
        l2_norm: `MetricEmbedding` (unit-length outputs) if `True`, else a
            plain `Dense`.
        include_top: Whether to add the embedding layer.
        pooling: `"gem"`, `"avg"`, `"max"` or `None`.
        gem_p: The GeM power.
        name: The model's name.

    Returns:
        A Functional model: `Input -> backbone -> pooling -> embedding`.

    Raises:
        ValueError: If the backbone's output is not a 4-D feature map while a
            pooling is requested.
    """
    inputs = keras.Input(shape=tuple(input_shape), name="images")
    x = backbone(inputs)
    if pooling is not None and len(x.shape) != 4:
        raise ValueError(
            f"pooling={pooling!r} needs a backbone whose output is a 4-D feature map; "
            f"{backbone.name!r} outputs shape {x.shape}. Use a backbone without its own "
            "pooling or classifier, or pooling=None with include_top=False."
        )
    if pooling == "gem":
        x = GeneralizedMeanPooling2D(p=gem_p, name="gem_pool")(x)
    elif pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    elif pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name="max_pool")(x)
    if include_top:
        if l2_norm:
            x = MetricEmbedding(embedding_size, name="metric_embedding")(x)
        else:
            x = keras.layers.Dense(embedding_size, name="embedding")(x)
    return keras.Model(inputs, x, name=name)
