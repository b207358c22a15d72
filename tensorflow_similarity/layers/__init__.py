"""Keras layers of tensorflow-similarity."""

from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization

__all__ = ["SyncBatchNormalization"]
