"""Tiny models and views shared by the ContrastiveModel tests and their worker script."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model

ALGORITHMS = ["simsiam", "simclr", "barlow", "vicreg"]
GLOBAL_BATCH = 8
IMAGE_SHAPE = (6, 6, 2)


def tiny_backbone(regularizer=None) -> keras.Model:
    inputs = keras.Input(IMAGE_SHAPE)
    x = keras.layers.Conv2D(4, 3, padding="same", kernel_regularizer=regularizer)(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, x, name="backbone")


def tiny_model(algorithm, sync_bn=True, regularizer=None, **kwargs) -> ContrastiveModel:
    keras.utils.set_random_seed(1)
    return create_contrastive_model(
        tiny_backbone(regularizer),
        algorithm,
        projector_hidden_dim=16,
        projector_output_dim=8,
        predictor_hidden_dim=16,
        sync_bn=sync_bn,
        **kwargs,
    )


def views(seed=0, n=GLOBAL_BATCH):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, *IMAGE_SHAPE)).astype("float32")
    noise = 0.3 * rng.normal(size=(2, n, *IMAGE_SHAPE)).astype("float32")
    return base + noise[0], base + noise[1]
