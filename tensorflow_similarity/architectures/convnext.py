"""ConvNeXt from `keras.applications` for similarity learning."""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras

from tensorflow_similarity.architectures.applications import build_application
from tensorflow_similarity.architectures.arguments import check_variant
from tensorflow_similarity.architectures.builder import build_similarity_model
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin, resolve_sync_bn

VARIANTS = ("tiny", "small", "base", "large", "xlarge")
_APPLICATIONS = {
    "tiny": "ConvNeXtTiny",
    "small": "ConvNeXtSmall",
    "base": "ConvNeXtBase",
    "large": "ConvNeXtLarge",
    "xlarge": "ConvNeXtXLarge",
}


def ConvNeXtSim(
    input_shape: Sequence[int | None],
    embedding_size: int = 128,
    weights: str | os.PathLike | None = None,
    trainable: str = "full",
    l2_norm: bool = True,
    include_top: bool = True,
    pooling: str | None = "gem",
    gem_p: float = 3.0,
    sync_bn: bool | SyncBatchNormPlugin = False,
    variant: str = "tiny",
    name: str | None = None,
) -> keras.Model:
    """Builds a ConvNeXt embedding model for similarity learning.

    The backbone is `build_convnext()`: `keras.applications.ConvNeXt<Variant>`
    without its classifier (Liu et al., "A ConvNet for the 2020s", 2022),
    followed by the shared head: pooling, then `MetricEmbedding` or `Dense`.

    ConvNeXt normalises with `LayerNormalization`, computed per sample, not
    with batch norm: there is nothing to synchronise, so `sync_bn` only warns
    (a `UserWarning`) and the model is the same as without it. The argument is
    accepted so that code can switch backbones without changing its call.

    The application normalises raw `[0, 255]` RGB images itself. Images from
    32x32 work.

    Args:
        input_shape: One RGB image's shape, e.g. `(224, 224, 3)`.
        embedding_size: Size of the embedding. Defaults to `128`.
        weights: `None` (default), `"imagenet"` (downloaded once and cached by
            `keras.applications`) or the path to a weights file of the
            application without its top.
        trainable: `"full"` (default), `"partial"` (only the last stage, from
            its downsampling layer, and the head train) or `"frozen"`.
        l2_norm: `MetricEmbedding` if `True` (default), else `Dense`.
        include_top: Whether to add the embedding layer. Defaults to `True`.
        pooling: `"gem"` (default), `"avg"`, `"max"`, or `None` (only with
            `include_top=False`).
        gem_p: The GeM power. Defaults to `3.0`.
        sync_bn: `False` (default), `True` or a `SyncBatchNormPlugin`; has no
            effect, see above.
        variant: `"tiny"` (default), `"small"`, `"base"`, `"large"` or
            `"xlarge"`, case-insensitive.
        name: The model's name. Defaults to `"convnext_<variant>sim"`.

    Returns:
        A `SimilarityModel` (a Keras Functional model).

    Raises:
        ValueError: For a bad argument, `variant` included, before anything is
            built.
        TypeError: For a `sync_bn` that is not `False`, `True` or a plugin.

    Example:

    >>> from tensorflow_similarity.architectures import ConvNeXtSim
    >>> model = ConvNeXtSim((32, 32, 3), variant="tiny")
    >>> model.output_shape
    (None, 128)
    """
    variant = check_variant("ConvNeXtSim", variant, VARIANTS)
    return build_similarity_model(
        "ConvNeXtSim",
        lambda plugin: build_application(
            "ConvNeXtSim", _APPLICATIONS[variant], input_shape, weights, plugin
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
        starts_last_stage=lambda layer: layer.name.endswith("_downsampling_block_2"),
        name=name or f"convnext_{variant}sim",
    )


def build_convnext(
    input_shape: Sequence[int | None],
    variant: str = "tiny",
    weights: str | os.PathLike | None = None,
    sync_bn: bool | SyncBatchNormPlugin = False,
) -> keras.Model:
    """Builds the ConvNeXt backbone; `sync_bn` warns, ConvNeXt having no batch norm.

    Args:
        input_shape: One RGB image's shape, at least 32x32.
        variant: `"tiny"` (default) to `"xlarge"`, case-insensitive.
        weights: `None` (default), `"imagenet"` or a weights-file path.
        sync_bn: `False` (default), `True` or a `SyncBatchNormPlugin`. The
            plugin converts the layers its `should_convert` selects; for the
            default plugins there are none, and a `UserWarning` says so.

    Returns:
        `keras.applications.ConvNeXt<Variant>(include_top=False)`.

    Raises:
        ValueError: For a bad `input_shape`, `variant` or `weights`, before
            anything is built.
        TypeError: For a bad `sync_bn`.
    """
    variant = check_variant("ConvNeXtSim", variant, VARIANTS)
    return build_application(
        "ConvNeXtSim", _APPLICATIONS[variant], input_shape, weights, resolve_sync_bn(sync_bn)
    )
