"""Keras layers of tensorflow-similarity."""

from tensorflow_similarity.layers.cosine_classifier import CosineClassifier
from tensorflow_similarity.layers.gem_pooling import GeneralizedMeanPooling2D
from tensorflow_similarity.layers.metric_embedding import MetricEmbedding
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization

__all__ = [
    "CosineClassifier",
    "GeneralizedMeanPooling2D",
    "MetricEmbedding",
    "SyncBatchNormalization",
]
