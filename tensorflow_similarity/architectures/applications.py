"""`keras.applications` backbones, synchronised by the sync-BN plugin."""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras

from tensorflow_similarity.architectures.arguments import check_input_shape, check_weights
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin


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
    if plugin is None:
        return backbone
    return plugin.apply(backbone, share_layers=True)
