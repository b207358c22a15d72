"""Argument checks of the architecture builders, run before any layer is built.

Every builder takes `input_shape, embedding_size, weights, trainable, l2_norm,
include_top, pooling, gem_p, sync_bn`; a bad value fails fast with a message
naming the builder, the argument and the fix.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_choice, is_int, is_real
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin

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
        if dim is not None and not is_int(dim):
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


def check_head_args(
    builder: str,
    *,
    embedding_size: int,
    trainable: str,
    l2_norm: bool,
    include_top: bool,
    pooling: str | None,
    gem_p: float,
) -> None:
    """Checks the head and trainable arguments shared by every builder.

    Args:
        builder: Name of the calling builder, for the error messages.
        embedding_size: Output size of the embedding layer.
        trainable: One of `TRAINABLE_MODES`.
        l2_norm: Whether the embedding is L2-normalised.
        include_top: Whether the embedding layer is added.
        pooling: One of `POOLING_MODES`.
        gem_p: The GeM power, used when `pooling="gem"`.

    Raises:
        ValueError: For an unknown `trainable` or `pooling`, `include_top=True`
            without pooling, a non-positive `embedding_size` or a bad `gem_p`.
        TypeError: For non-boolean `l2_norm` / `include_top`.
    """
    check_choice(
        "trainable",
        trainable,
        TRAINABLE_MODES,
        owner=builder,
        hint="('full': the whole backbone trains, 'partial': only its last stage, "
        "'frozen': none of it; the head always trains).",
    )
    check_choice(
        "pooling",
        pooling,
        POOLING_MODES,
        owner=builder,
        hint="('gem': generalised mean, 'avg', 'max', None: no pooling, the 4-D feature map).",
    )
    check_bool("l2_norm", l2_norm, owner=builder)
    check_bool("include_top", include_top, owner=builder)
    if include_top and pooling is None:
        raise ValueError(
            f"{builder}: include_top=True puts the embedding on pooled features, so it needs "
            "pooling='gem', 'avg' or 'max'. For the 4-D feature map use include_top=False, "
            "pooling=None."
        )
    if include_top and (not is_int(embedding_size) or embedding_size < 1):
        raise ValueError(
            f"{builder}: embedding_size must be a positive integer. "
            f"Received: embedding_size={embedding_size!r}"
        )
    if pooling == "gem" and (not is_real(gem_p) or gem_p != gem_p):
        raise ValueError(
            f"{builder}: gem_p must be a real number (1.0 is average pooling, math.inf max "
            f"pooling). Received: gem_p={gem_p!r}"
        )


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
