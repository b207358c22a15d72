"""The glue every architecture builder shares: checks, backbone, trainable policy, head."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import keras

from tensorflow_similarity.architectures.arguments import check_head_args
from tensorflow_similarity.architectures.head import similarity_model
from tensorflow_similarity.architectures.trainable import set_trainable
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin, resolve_sync_bn
from tensorflow_similarity.models.similarity_model import SimilarityModel


def build_similarity_model(
    builder: str,
    make_backbone: Callable[[SyncBatchNormPlugin | None], keras.Model],
    input_shape: Sequence[int | None],
    *,
    embedding_size: int,
    pretrained: bool,
    trainable: str,
    l2_norm: bool,
    include_top: bool,
    pooling: str | None,
    gem_p: float,
    sync_bn: bool | SyncBatchNormPlugin,
    starts_last_stage: Callable[[keras.layers.Layer], bool] | None,
    name: str,
) -> SimilarityModel:
    """Checks the shared arguments, builds the backbone and puts the head on it.

    `sync_bn` is resolved here, once; `make_backbone` receives the plugin (or
    `None`), checks its own arguments before building anything, and returns
    the backbone, synchronised by the plugin.

    Args:
        builder: Name of the public builder, for messages.
        make_backbone: `plugin -> backbone` (a model to a 4-D feature map).
        input_shape: One image's shape, the input of the returned model.
        embedding_size: Output size of the embedding layer.
        pretrained: Whether weights were loaded into the backbone: then its
            batch-norm layers are frozen (inference mode, keeping the
            pretrained statistics), unless they are synchronised, which would
            make synchronising them pointless.
        trainable: `"full"`, `"partial"` or `"frozen"` (see `set_trainable`).
        l2_norm: `MetricEmbedding` if `True`, else `Dense`.
        include_top: Whether the embedding layer is added.
        pooling: `"gem"`, `"avg"`, `"max"` or `None`.
        gem_p: The GeM power.
        sync_bn: The user's `sync_bn`: `False`, `True` or a plugin.
        starts_last_stage: Predicate marking the first layer of the
            backbone's last stage, for `trainable="partial"`.
        name: The model's name.

    Returns:
        The `SimilarityModel` `images -> backbone -> pooling -> embedding`.

    Raises:
        ValueError: For a bad argument, before anything is built.
        TypeError: For a `sync_bn` that is not `False`, `True` or a plugin, or
            a non-boolean flag.
    """
    plugin = resolve_sync_bn(sync_bn)
    check_head_args(
        builder,
        embedding_size=embedding_size,
        trainable=trainable,
        l2_norm=l2_norm,
        include_top=include_top,
        pooling=pooling,
        gem_p=gem_p,
    )
    backbone = make_backbone(plugin)
    set_trainable(
        backbone,
        trainable,
        starts_last_stage=starts_last_stage,
        freeze_batch_norm=pretrained and plugin is None,
    )
    return similarity_model(
        backbone,
        input_shape,
        embedding_size=embedding_size,
        l2_norm=l2_norm,
        include_top=include_top,
        pooling=pooling,
        gem_p=gem_p,
        name=name,
    )
