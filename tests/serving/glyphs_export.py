"""A tiny trained glyphs model and its export, for the serving and `tfsim export` tests.

A `SimilarityModel` with synchronised batch norm, trained a few steps on
16x16 glyphs with a metric loss, indexing the training images plus the
first `DUPLICATES` of them a second time (exact ties: a query equal to one
of them is at distance 0 from two records). Exported once, with TFLite.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import keras
import numpy as np

from tensorflow_similarity.datasets import load_data
from tensorflow_similarity.layers import MetricEmbedding, SyncBatchNormalization
from tensorflow_similarity.losses import MultiSimilarityLoss
from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.serving import ServingExport, export_model

K = 5
DUPLICATES = 8
QUERIES = 50


@dataclasses.dataclass
class Trained:
    model: SimilarityModel
    index_x: np.ndarray
    index_y: np.ndarray
    queries: np.ndarray
    class_names: list[str]
    export: ServingExport


def glyphs_model(image_size: int = 16, embedding_size: int = 16) -> SimilarityModel:
    """A small convolutional `SimilarityModel` whose batch norm is synchronised."""
    inputs = keras.Input((image_size, image_size, 3))
    x = inputs
    for filters in (8, 16):
        x = keras.layers.Conv2D(filters, 3, strides=2, padding="same", use_bias=False)(x)
        x = SyncBatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return SimilarityModel(inputs, MetricEmbedding(embedding_size)(x))


def train_and_export(root: Path) -> Trained:
    """Trains the model a few steps, indexes it and exports it (with TFLite) under `root`."""
    keras.utils.set_random_seed(0)
    data = load_data("glyphs", 16, seed=0, limit=400)
    model = glyphs_model()
    model.compile(keras.optimizers.Adam(1e-2), loss=MultiSimilarityLoss(), distance="cosine")
    model.fit(data.x_train, data.y_train, batch_size=64, epochs=1, verbose=0)
    index_x = np.concatenate([data.x_train, data.x_train[:DUPLICATES]])
    index_y = np.concatenate([data.y_train, data.y_train[:DUPLICATES]])
    model.index(index_x, index_y, verbose=0)
    # Test images, then images indexed twice: each of those is tied at distance 0.
    queries = np.concatenate([data.x_test[: QUERIES - DUPLICATES], data.x_train[:DUPLICATES]])
    path = root / "served"
    export = export_model(model, path, k=K, class_names=data.class_names, tflite=True, verbose=0)
    return Trained(model, index_x, index_y, queries, list(data.class_names), export)
