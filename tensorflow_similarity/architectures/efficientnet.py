"""EfficientNet (B0-B7) from `keras.applications`, with optional synchronised batch norm."""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras

from tensorflow_similarity.architectures.applications import build_application
from tensorflow_similarity.architectures.arguments import TRAINABLE_MODES, check_variant
from tensorflow_similarity.architectures.builder import build_similarity_model
from tensorflow_similarity.architectures.trainable import set_trainable
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin, resolve_sync_bn

VARIANTS = ("B0", "B1", "B2", "B3", "B4", "B5", "B6", "B7")
# 0.17's tables: each variant's nominal (ImageNet) input size, and its Keras application.
EFF_INPUT_SIZE = {
    "B0": 224,
    "B1": 240,
    "B2": 260,
    "B3": 300,
    "B4": 380,
    "B5": 456,
    "B6": 528,
    "B7": 600,
}
EFF_ARCHITECTURE = {
    variant: getattr(keras.applications, f"EfficientNet{variant}") for variant in VARIANTS
}


def EfficientNetSim(
    input_shape: Sequence[int | None],
    embedding_size: int = 128,
    variant: str = "B0",
    weights: str | os.PathLike | None = None,
    trainable: str = "full",
    l2_norm: bool = True,
    include_top: bool = True,
    pooling: str | None = "gem",
    gem_p: float = 3.0,
    *,
    sync_bn: bool | SyncBatchNormPlugin = False,
    name: str | None = None,
) -> keras.Model:
    """Builds an EfficientNet embedding model for similarity learning.

    The backbone is `build_efficientnet()`: `keras.applications.EfficientNet<variant>`
    without its classifier (Tan and Le, "EfficientNet: Rethinking Model
    Scaling for Convolutional Neural Networks", 2019), whose batch-norm layers
    are upgraded by the sync-BN plugin when `sync_bn` is set, followed by the
    shared head: pooling, then `MetricEmbedding` or `Dense`.

    The application rescales and normalises raw `[0, 255]` RGB images itself.
    Images smaller than the variant's nominal size work (from 32x32).

    Args:
        input_shape: One RGB image's shape, e.g. `(224, 224, 3)`; at least
            32x32, 3 channels.
        embedding_size: Size of the embedding. Defaults to `128`.
        variant: `"B0"` (default) to `"B7"`, case-insensitive.
        weights: `None` (default), `"imagenet"` (downloaded once and cached by
            `keras.applications`) or the path to a weights file of the
            application without its top. Allowed with `sync_bn`: the
            conversion keeps the weights.
        trainable: `"full"` (default), `"partial"` (only the last stage,
            `block7*` and `top_*`, and the head train) or `"frozen"`. When
            pretrained weights are loaded without `sync_bn`, the batch-norm
            layers are frozen (inference mode), as in the original package;
            with `sync_bn` they follow `trainable`, since synchronising
            frozen layers would do nothing.
        l2_norm: `MetricEmbedding` if `True` (default), else `Dense`.
        include_top: Whether to add the embedding layer. Defaults to `True`.
        pooling: `"gem"` (default), `"avg"`, `"max"`, or `None` (only with
            `include_top=False`).
        gem_p: The GeM power. Defaults to `3.0`.
        sync_bn: `False` (default), `True` or a `SyncBatchNormPlugin`.
            Keyword-only, as `name`.
        name: The model's name. Defaults to `"efficientnet<variant>sim"`.

    Returns:
        A `SimilarityModel` (a Keras Functional model).

    Raises:
        ValueError: For a bad argument, `variant` included, before anything is
            built.
        TypeError: For a `sync_bn` that is not `False`, `True` or a plugin.

    Example:

    >>> from tensorflow_similarity.architectures import EfficientNetSim
    >>> model = EfficientNetSim((32, 32, 3), variant="b0", sync_bn=True)
    >>> model.output_shape
    (None, 128)
    """
    variant = check_variant("EfficientNetSim", variant, VARIANTS)
    return build_similarity_model(
        "EfficientNetSim",
        lambda plugin: build_application(
            "EfficientNetSim", f"EfficientNet{variant}", input_shape, weights, plugin
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
        starts_last_stage=_starts_last_stage,
        name=name or f"efficientnet{variant.lower()}sim",
    )


def build_efficientnet(
    input_shape: Sequence[int | None],
    variant: str = "B0",
    weights: str | os.PathLike | None = None,
    sync_bn: bool | SyncBatchNormPlugin = False,
) -> keras.Model:
    """Builds the EfficientNet backbone and upgrades its batch norm when `sync_bn` is set.

    Args:
        input_shape: One RGB image's shape, at least 32x32.
        variant: `"B0"` (default) to `"B7"`, case-insensitive.
        weights: `None` (default), `"imagenet"` or a weights-file path.
        sync_bn: `False` (default), `True` or a `SyncBatchNormPlugin`; the
            rebuild keeps the loaded weights.

    Returns:
        `keras.applications.EfficientNet<variant>(include_top=False)`, with
        `SyncBatchNormalization` layers when `sync_bn` is set.

    Raises:
        ValueError: For a bad `input_shape`, `variant` or `weights`, before
            anything is built.
        TypeError: For a bad `sync_bn`.
    """
    variant = check_variant("EfficientNetSim", variant, VARIANTS)
    return build_application(
        "EfficientNetSim", f"EfficientNet{variant}", input_shape, weights, resolve_sync_bn(sync_bn)
    )


def build_effnet(
    variant: str, weights: str | os.PathLike | None = None, trainable: str = "full"
) -> keras.Model:
    """Builds an EfficientNet backbone as tensorflow-similarity 0.17's `build_effnet` did.

    Any image size (`(None, None, 3)` input), `trainable` applied as in
    `EfficientNetSim`, and the batch-norm layers frozen when weights are
    loaded. Unlike 0.17, batch norm is not synchronised: use
    `build_efficientnet(shape, variant, weights, sync_bn=True)` for that.

    Args:
        variant: `"B0"` to `"B7"`, case-insensitive.
        weights: `None` (default), `"imagenet"` or a weights-file path.
        trainable: `"full"` (default), `"partial"` (`block7*` and `top_*`;
            0.17 also trained blocks 5 and 6) or `"frozen"`.

    Returns:
        The backbone, images to the last feature map.

    Raises:
        ValueError: For a bad `variant`, `weights` or `trainable`, before
            anything is built.
    """
    variant = check_variant("EfficientNetSim", variant, VARIANTS)
    if trainable not in TRAINABLE_MODES:
        # 0.17's message, which its users may match.
        raise ValueError(
            f"{trainable} is not a supported option for 'trainable'. "
            f"build_effnet takes one of {', '.join(TRAINABLE_MODES)}."
        )
    backbone = build_efficientnet((None, None, 3), variant, weights)
    set_trainable(
        backbone,
        trainable,
        starts_last_stage=_starts_last_stage,
        freeze_batch_norm=weights is not None,
    )
    return backbone


def _starts_last_stage(layer: keras.layers.Layer) -> bool:
    return layer.name.startswith(("block7", "top_"))
