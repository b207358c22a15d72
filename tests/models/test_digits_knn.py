"""SimSiam on scikit-learn's digits: training makes the embeddings more useful to kNN."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from tensorflow_similarity.augmenters import simsiam_augmenter
from tensorflow_similarity.callbacks import knn_accuracy
from tensorflow_similarity.models import create_contrastive_model
from tensorflow_similarity.testing import mirrored_strategy

SIZE = 16
# Digits carry no colour and flipping changes their meaning: crops only.
CROPS_ONLY = {"flip_prob": 0.0, "jitter_prob": 0.0, "grayscale_prob": 0.0, "blur_prob": 0.0}


def small_backbone() -> keras.Model:
    inputs = keras.Input((SIZE, SIZE, 1))
    x = inputs
    for filters, stride in ((32, 1), (64, 2), (64, 2)):
        x = keras.layers.Conv2D(filters, 3, strides=stride, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
    return keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x), name="backbone")


@pytest.mark.slow
def test_simsiam_training_raises_knn_accuracy_on_digits():
    digits = load_digits()
    images = tf.image.resize((digits.images / 16.0)[..., None].astype("float32"), (SIZE, SIZE))
    x_train, x_test, y_train, y_test = train_test_split(
        images.numpy(), digits.target, test_size=0.25, random_state=0, stratify=digits.target
    )
    # Queries are crops of the test digits (a fixed draw): a random network scores
    # well on clean digits (kNN on raw pixels is ~98%) but is not crop-invariant,
    # which is exactly what the self-supervised objective teaches.
    queries = simsiam_augmenter(SIZE, seed=123, crop_scale=(0.3, 0.6), **CROPS_ONLY)
    x_query = queries(tf.constant(x_test))[0].numpy()

    keras.utils.set_random_seed(0)
    with mirrored_strategy(2).scope():
        model = create_contrastive_model(
            small_backbone(),
            "simsiam",
            projector_hidden_dim=128,
            projector_output_dim=128,
            predictor_hidden_dim=32,
            sync_bn=True,
        )
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9))

    def accuracy() -> float:
        return knn_accuracy(model.embed(x_train), y_train, model.embed(x_query), y_test, k=10)

    untrained = accuracy()
    views = simsiam_augmenter(SIZE, seed=0, crop_scale=(0.3, 1.0), **CROPS_ONLY)
    data = (
        tf.data.Dataset.from_tensor_slices(x_train)
        .shuffle(len(x_train), seed=0)
        .batch(128, drop_remainder=True)
        .map(lambda batch: views(batch))
    )
    # Six epochs: a margin over the threshold that rounding-level changes cannot undo.
    history = model.fit(data, epochs=6, verbose=0).history
    trained = accuracy()
    assert np.all(np.isfinite(history["loss"])) and history["loss"][-1] < history["loss"][0]
    assert trained > untrained + 0.05, (untrained, trained)
