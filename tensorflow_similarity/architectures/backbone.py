"""Any user, keras-cv or keras-hub backbone with the shared head and optional synchronised BN."""

from __future__ import annotations

import os
from collections.abc import Sequence

import keras

from tensorflow_similarity._validation import check_bool
from tensorflow_similarity.architectures.arguments import check_input_shape, check_weights
from tensorflow_similarity.architectures.builder import build_similarity_model
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.distribute.rebuild import check_shareable


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
    """Builds an embedding model on any image backbone, e.g. a keras-hub or keras-cv one.

    The backbone is any Functional or Sequential model from images to a 4-D
    feature map: one of your own, a `keras.applications` model without its
    top, or a keras-hub or keras-cv backbone, such as
    `keras_hub.models.ResNetBackbone(stackwise_num_filters=..., ...)` or
    `keras_cv.models.ResNetV2Backbone(stackwise_filters=..., ...)`. When
    `sync_bn` is set, its batch-norm layers are upgraded by the plugin (the
    rebuild keeps every weight). The shared head follows: pooling, then
    `MetricEmbedding` or `Dense`.

    With `sync_bn`, every batch-norm layer must sit in the backbone's
    Functional graph. keras-hub's `ResNetBackbone` and `EfficientNetBackbone`
    with `"v1"` blocks (EfficientNet B0 to B7) qualify; its EfficientNetV2
    blocks (`"fused"`, `"unfused"`) and `MobileNetBackbone` create their batch
    norm inside subclassed layers, which no rebuild can reach, so the call
    stops with an error naming each such layer by path. For those
    architectures use a Functional model instead
    (`keras.applications.EfficientNetV2B0(include_top=False)`,
    `keras.applications.MobileNetV3Small(include_top=False)`), create
    `SyncBatchNormalization` in the block's own code, or keep
    `sync_bn=False` (each replica normalises its own share of the batch).

    The model is built on `backbone` itself, as Keras models built on a
    backbone are: without `sync_bn` it holds `backbone`; with `sync_bn` it
    holds every layer and variable of `backbone` except the batch-norm layers,
    which are replaced by synchronised ones with the same weights (no second
    copy of the weights in memory). Training the model then trains
    `backbone`'s other layers too, while `backbone`'s own batch-norm layers
    keep their old weights and statistics: after training, use the returned
    model (its backbone is `model.layers[1]`; `revert_sync_batchnorm` gives a
    plain copy), not `backbone`. `share_layers=False` converts a copy instead
    and leaves `backbone` untouched.

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
        A `SimilarityModel` (a Keras Functional model).

    Raises:
        ValueError: For a bad argument (`"partial"` without a `last_stage`
            found in the backbone included), a backbone whose output is not
            a 4-D feature map while a pooling is requested, or, with `sync_bn`,
            a batch-norm layer inside a subclassed layer (named by path) or,
            with `share_layers=True`, a backbone built under another
            distribution strategy than the current one, before the model is
            built.
        TypeError: If `backbone` is not a Keras model, or for a bad `sync_bn`
            or `share_layers`.

    Example:

    >>> import keras_cv
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.architectures import BackboneSim
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
    check_bool(
        "share_layers",
        share_layers,
        owner="BackboneSim",
        hint="Use share_layers=True (share the backbone's layers other than batch norm) or "
        "False (convert a copy).",
    )
    if input_shape is None:
        input_shape = backbone.input_shape[1:] if backbone.inputs else None
    shape = check_input_shape("BackboneSim", input_shape, min_size=1)

    def make_backbone(plugin: SyncBatchNormPlugin | None) -> keras.Model:
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
                f"output; {backbone.name!r} outputs {output_shape}. Use the backbone without "
                "its pooling or classifier, or pooling=None with include_top=False."
            )
        if weights is not None:
            if plugin is not None and share_layers:
                # The conversion would find variables of another strategy only after the
                # weights file had been loaded into the caller's backbone.
                check_shareable(backbone, [], "BackboneSim")
            backbone.load_weights(os.fspath(weights))
        if plugin is None:
            return backbone
        try:
            return plugin.apply(backbone, share_layers=share_layers)
        except ValueError as error:
            raise ValueError(f"BackboneSim(share_layers={share_layers}): {error}") from error

    return build_similarity_model(
        "BackboneSim",
        make_backbone,
        shape,
        embedding_size=embedding_size,
        pretrained=weights is not None,
        trainable=trainable,
        l2_norm=l2_norm,
        include_top=include_top,
        pooling=pooling,
        gem_p=gem_p,
        sync_bn=sync_bn,
        starts_last_stage=lambda layer: layer.name == last_stage,
        name=name or f"{backbone.name}sim",
    )
