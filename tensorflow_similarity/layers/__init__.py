"""Keras layers of tensorflow-similarity."""

from tensorflow_similarity.layers.activation_std_logging import ActivationStdLoggingLayer
from tensorflow_similarity.layers.batch_norm_statistics import recompute_batch_norm_statistics
from tensorflow_similarity.layers.cosine_classifier import CosineClassifier
from tensorflow_similarity.layers.gem_pooling import (
    GeneralizedMeanPooling,
    GeneralizedMeanPooling2D,
)
from tensorflow_similarity.layers.gem_pooling_1d import GeneralizedMeanPooling1D
from tensorflow_similarity.layers.metric_embedding import MetricEmbedding
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization

__all__ = [
    "ActivationStdLoggingLayer",
    "CosineClassifier",
    "GeneralizedMeanPooling",
    "GeneralizedMeanPooling1D",
    "GeneralizedMeanPooling2D",
    "MetricEmbedding",
    "SyncBatchNormalization",
    "recompute_batch_norm_statistics",
]
