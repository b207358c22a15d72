"""Synchronised batch norm for `tf.distribute`: the plugin and the rebuild utility."""

from tensorflow_similarity.distribute.plugin import (
    GroupSyncBatchNorm,
    SyncBatchNormPlugin,
    resolve_sync_bn,
)

__all__ = [
    "GroupSyncBatchNorm",
    "SyncBatchNormPlugin",
    "resolve_sync_bn",
]
