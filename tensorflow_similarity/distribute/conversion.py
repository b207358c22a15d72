"""`convert_sync_batchnorm` and `revert_sync_batchnorm`: a plugin's `apply` and `revert`."""

from __future__ import annotations

import warnings

import keras

from tensorflow_similarity import layer_walk
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin, check_model


def convert_sync_batchnorm(
    model: keras.Model,
    plugin: SyncBatchNormPlugin | None = None,
    *,
    share_layers: bool = False,
) -> keras.Model:
    """Returns a copy of `model` whose batch-norm layers are synchronised.

    This is `plugin.apply(model, share_layers=share_layers)`: every layer the
    plugin's `should_convert` selects (by default each
    `keras.layers.BatchNormalization` not yet synchronised) is replaced by
    `plugin.create_layer(**layer.get_config())`, with its weights. Each
    Functional or Sequential model, the outer one and those nested in it, is
    rebuilt with `keras.models.clone_model`, so shared layers, several inputs
    and outputs and skip connections keep their structure; every other layer
    is rebuilt from its config, its variables created from the original's
    values. The copy keeps layer names, `trainable` flags, dtype policies and
    every batch-norm argument, computes in inference exactly what `model`
    computes, and shares no layer or variable with it. Call it inside
    `strategy.scope()` to create the copy's variables under that strategy. A
    compiled model's copy is compiled again from its compile config, with a
    fresh optimizer. A Functional subclass whose constructor is not `(inputs,
    outputs, name)` (a keras-hub or keras-cv backbone, say) comes back as a plain
    Functional model with the same graph, layers and weights.

    With `share_layers=True` only the new batch-norm layers are created: the
    result reuses every other layer of `model` with its variables, which is
    several times cheaper. It is meant for a model the result replaces (a
    builder's temporary, or a backbone the result is built on): training or
    freezing one then trains or freezes the other, and the variables of
    `model` must belong to the strategy of the call.

    Batch norm created inside a subclassed layer or model (keras-hub's
    EfficientNetV2 and MobileNet blocks, for example) is out of reach: the
    call raises before any work, naming every such layer by path. Build
    that block with the Functional API, create `SyncBatchNormalization` (or
    `plugin.create_layer(...)`) in its own code, or use a Functional
    equivalent such as `keras.applications.MobileNetV3Small`.

    Nothing to convert is not an error: `model` itself is returned, with a
    warning.

    Args:
        model: A Functional or Sequential `keras.Model`.
        plugin: The `SyncBatchNormPlugin` that decides which layers to replace
            and creates their replacements. Defaults to `None`, meaning
            `SyncBatchNormPlugin()` (all replicas in one sync group).
        share_layers: Whether the result reuses the layers and variables of
            `model` that are not converted. Defaults to `False`.

    Returns:
        The converted model, or `model` itself when the plugin selects no layer.

    Raises:
        TypeError: If `model` is not a `keras.Model`, `plugin` is not a
            `SyncBatchNormPlugin` or `share_layers` is not a bool.
        ValueError: If a selected layer sits inside a subclassed layer or model
            (the rebuild cannot reach it), the plugin cannot create its
            replacement (for example `renorm=True`), or a layer cannot be
            rebuilt from its config; the message names the layers by path.
            With `share_layers=True`, also if variables of `model` were
            created under another distribution strategy than the current one.

    Example:

    >>> import keras
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.distribute import convert_sync_batchnorm
    >>> model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    >>> with tf.distribute.MirroredStrategy().scope():
    ...     synced = convert_sync_batchnorm(model)
    """
    check_model(model, "convert_sync_batchnorm")
    if plugin is None:
        plugin = SyncBatchNormPlugin()
    elif not isinstance(plugin, SyncBatchNormPlugin):
        raise TypeError(
            "convert_sync_batchnorm expects plugin=None (the default SyncBatchNormPlugin()) "
            "or a SyncBatchNormPlugin instance such as GroupSyncBatchNorm(2). Received: "
            f"{plugin!r} of type {type(plugin).__name__}. To turn a sync_bn flag into a "
            "plugin, use resolve_sync_bn(sync_bn)."
        )
    converted = plugin.apply(model, share_layers=share_layers)
    if converted is model and any(
        plugin.should_revert(layer) for layer in layer_walk.all_layers(model)
    ):
        warnings.warn(
            f"convert_sync_batchnorm: model {model.name!r} has no batch-norm layer selected "
            f"by {plugin!r}: its batch norm is synchronised already. It is returned unchanged.",
            UserWarning,
            stacklevel=2,
        )
    return converted


def revert_sync_batchnorm(
    model: keras.Model, plugin: SyncBatchNormPlugin | None = None
) -> keras.Model:
    """Returns a copy of `model` whose synchronised batch-norm layers are plain again.

    This is `plugin.revert(model)`, the inverse of `convert_sync_batchnorm`:
    every `SyncBatchNormalization` (the plugin's `layer_class`) becomes a
    `keras.layers.BatchNormalization` with the same config (less
    `group_size`) and weights, for export or single-device use, and the rest
    is copied as `convert_sync_batchnorm` copies it. So
    `revert_sync_batchnorm(convert_sync_batchnorm(model))` has the classes,
    configs, weights and outputs of `model`. Nothing to revert returns `model`
    itself, with a warning.

    Args:
        model: A Functional or Sequential `keras.Model`.
        plugin: The plugin whose layers are reverted. Defaults to `None`,
            meaning `SyncBatchNormPlugin()`.

    Returns:
        The reverted copy of `model`, or `model` itself when there is nothing
        to revert.

    Raises:
        TypeError: If `model` is not a `keras.Model` or `plugin` not a plugin.
        ValueError: If a synchronised layer sits inside a subclassed layer or
            model, or a layer cannot be rebuilt from its config; the message
            names the layers by path.

    Example:

    >>> import os
    >>> import tempfile
    >>> import keras
    >>> from tensorflow_similarity.distribute import (
    ...     convert_sync_batchnorm, revert_sync_batchnorm)
    >>> model = keras.Sequential(
    ...     [keras.Input((4,)), keras.layers.Dense(8), keras.layers.BatchNormalization()])
    >>> synced = convert_sync_batchnorm(model)
    >>> type(synced.layers[-1]).__name__
    'SyncBatchNormalization'
    >>> plain = revert_sync_batchnorm(synced)
    >>> type(plain.layers[-1]).__name__
    'BatchNormalization'
    >>> plain.save(os.path.join(tempfile.mkdtemp(), "model.keras"))
    """
    check_model(model, "revert_sync_batchnorm")
    if plugin is None:
        plugin = SyncBatchNormPlugin()
    elif not isinstance(plugin, SyncBatchNormPlugin):
        raise TypeError(
            "revert_sync_batchnorm expects plugin=None or a SyncBatchNormPlugin instance. "
            f"Received: {plugin!r} of type {type(plugin).__name__}."
        )
    return plugin.revert(model)
