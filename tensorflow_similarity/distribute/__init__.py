"""Synchronised batch norm for `tf.distribute`: the plugin and the rebuild utility."""

from tensorflow_similarity.distribute.conversion import (
    convert_sync_batchnorm,
    revert_sync_batchnorm,
)
from tensorflow_similarity.distribute.plugin import (
    GroupSyncBatchNorm,
    SyncBatchNormPlugin,
    resolve_sync_bn,
)

__all__ = [
    "GroupSyncBatchNorm",
    "SyncBatchNormPlugin",
    "convert_sync_batchnorm",
    "resolve_sync_bn",
    "revert_sync_batchnorm",
]
