"""Any user or keras-cv backbone with the shared head and optional synchronised batch norm."""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras

from tensorflow_similarity.architectures.head import (
    check_builder_args,
    check_input_shape,
    check_weights,
    set_trainable,
    similarity_model,
    synchronise,
)
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.distribute.rebuild import all_layers, check_shareable


def BackboneSim(
    backbone: keras.Model,
    input_shape: Sequence[int | None] | None = None,
    embedding_size: int = 128,
    weights: str | os.PathLike | None = None,
    trainable: str = "full",
    l2_norm: bool = True,
    include_top: bool = True,
    pooling: str | None = "gem",
    gem_p: float = 3.0,
    sync_bn: bool | SyncBatchNormPlugin = False,
    last_stage: str | None = None,
    name: str | None = None,
    share_layers: bool = True,
) -> keras.Model:
    """Builds an embedding model on any image backbone, e.g. a keras-cv one.

    The backbone is any Functional or Sequential model from images to a 4-D
    feature map: one of your own, a `keras.applications` model without its
    top, or a keras-cv backbone built from arguments, such as
    `keras_cv.models.ResNetV2Backbone(stackwise_filters=..., ...)`. When
    `sync_bn` is set, its batch-norm layers are upgraded by the plugin (the
    rebuild keeps every weight). The shared head follows: pooling, then
    `MetricEmbedding` or `Dense`.

    The model is built on `backbone` itself, as Keras models built on a
    backbone are: without `sync_bn` it holds `backbone` (whose `trainable`
    flags are set); with `sync_bn` it holds every layer and variable of
    `backbone` except the batch-norm layers, which are replaced by
    synchronised ones with the same weights. Training the model then trains
    `backbone`'s other layers too (and `trainable` sets their flags), while
    `backbone`'s own batch-norm layers keep their old weights and
    statistics: after training, use the returned
    model (its backbone is `model.layers[1]`, and `revert_sync_batchnorm`
    gives a plain copy of it), not `backbone`. Sharing costs a fraction of a
    copy and no second set of weights in memory: for a keras-cv ResNetV2 at
    224x224, 35-40% of the backbone's construction time against 57-75% for
    a copy (`benchmark/architectures.py`). `share_layers=False` converts a
    copy instead and leaves `backbone` untouched.

    Args:
        backbone: The backbone model.
        input_shape: One image's shape; defaults to the backbone's input shape.
            Give it to fix the size of a backbone built for any size.
        embedding_size: Size of the embedding. Defaults to `128`.
        weights: `None` (default: keep the backbone's current weights) or the
            path to a weights file loaded into `backbone` first. Allowed with
            `sync_bn`: the conversion keeps the weights.
        trainable: `"full"` (default), `"partial"` (only the layers from
            `last_stage` on, in `backbone.layers` order, and the head train)
            or `"frozen"`. When a weights file is loaded without `sync_bn`,
            the batch-norm layers are frozen (inference mode), as for the
            other builders.
        l2_norm: `MetricEmbedding` if `True` (default), else `Dense`.
        include_top: Whether to add the embedding layer. Defaults to `True`.
        pooling: `"gem"` (default), `"avg"`, `"max"`, or `None` (only with
            `include_top=False`).
        gem_p: The GeM power. Defaults to `3.0`.
        sync_bn: `False` (default), `True` or a `SyncBatchNormPlugin`. A
            backbone without batch norm only gets a warning.
        last_stage: Name of the first layer of the backbone's last stage,
            required by `trainable="partial"`, e.g. `"conv5_block1_1_conv"`.
        name: The model's name. Defaults to `"<backbone name>sim"`.
        share_layers: With `sync_bn`, whether the model shares the layers and
            variables of `backbone` other than batch norm (default: `True`),
            or is built on a converted copy (`False`). Sharing needs the
            backbone's variables created under the current distribution
            strategy: build `backbone` inside the same `strategy.scope()`.
            Without `sync_bn`, `backbone` itself is used either way.

    Returns:
        A Keras Functional model.

    Raises:
        ValueError: For a bad argument (`"partial"` without a `last_stage`
            found in the backbone included), a backbone whose output is not
            a 4-D feature map while a pooling is requested, or, with `sync_bn`
            and `share_layers=True`, a backbone built under another
            distribution strategy than the current one, before the model is
            built.
        TypeError: If `backbone` is not a Keras model, or for a bad `sync_bn`
            or `share_layers`.

    Example:

    >>> import keras_cv
    >>> import tensorflow as tf
    >>> strategy = tf.distribute.MirroredStrategy()
    >>> with strategy.scope():
    ...     backbone = keras_cv.models.ResNetV2Backbone(
    ...         stackwise_filters=[64, 128], stackwise_blocks=[2, 2],
    ...         stackwise_strides=[1, 2], include_rescaling=False, input_shape=(32, 32, 3))
    ...     model = BackboneSim(backbone, sync_bn=True)
    >>> model.output_shape
    (None, 128)
    """
    if not isinstance(backbone, keras.Model):
        raise TypeError(
            "BackboneSim expects a built Keras model (Functional or Sequential) mapping images "
            f"to a 4-D feature map. Received: {backbone!r} of type {type(backbone).__name__}."
        )
    plugin = check_builder_args(
        "BackboneSim",
        embedding_size=embedding_size,
        trainable=trainable,
        l2_norm=l2_norm,
        include_top=include_top,
        pooling=pooling,
        gem_p=gem_p,
        sync_bn=sync_bn,
    )
    if not isinstance(share_layers, bool):
        raise TypeError(
            "BackboneSim expects share_layers=True (share the backbone's layers other than "
            "batch norm) or False (convert a copy). Received: "
            f"{share_layers!r} of type {type(share_layers).__name__}."
        )
    if input_shape is None:
        input_shape = backbone.input_shape[1:] if backbone.inputs else None
    shape = check_input_shape("BackboneSim", input_shape, min_size=1)
    check_weights("BackboneSim", weights, plugin, imagenet=False, pretrained_with_sync=True)
    layer_names = [layer.name for layer in backbone.layers]
    if trainable == "partial" and last_stage not in layer_names:
        raise ValueError(
            "BackboneSim: trainable='partial' needs last_stage, the name of the first layer "
            f"of the backbone's last stage. Received: last_stage={last_stage!r}; "
            f"{backbone.name!r} has layers {layer_names[:3]} ... {layer_names[-3:]}."
        )
    output_shape = backbone.output_shape
    if pooling is not None and (not isinstance(output_shape, tuple) or len(output_shape) != 4):
        raise ValueError(
            f"BackboneSim: pooling={pooling!r} needs a backbone with one 4-D feature-map "
            f"output; {backbone.name!r} outputs {output_shape}. Use the backbone without its "
            "pooling or classifier, or pooling=None with include_top=False."
        )

    if plugin is not None and share_layers:
        replaced = [layer for layer in all_layers(backbone) if plugin.should_convert(layer)]
        # Nothing to convert: `backbone` itself is used, as without sync_bn (with a warning).
        if replaced:
            check_shareable(backbone, replaced, "BackboneSim")

    if weights is not None:
        backbone.load_weights(os.fspath(weights))
    backbone = synchronise("BackboneSim", backbone, plugin, share_layers=share_layers)
    set_trainable(
        backbone,
        trainable,
        starts_last_stage=lambda layer: layer.name == last_stage,
        freeze_batch_norm=weights is not None and plugin is None,
    )
    return similarity_model(
        backbone,
        shape,
        embedding_size=embedding_size,
        l2_norm=l2_norm,
        include_top=include_top,
        pooling=pooling,
        gem_p=gem_p,
        name=name or f"{backbone.name}sim",
    )
