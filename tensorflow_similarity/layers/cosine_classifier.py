"""Cosine similarities to trained class centres, the head of margin losses such as ArcFace."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.l2_normalize import l2_normalize


@keras.saving.register_keras_serializable(package="Similarity")
class CosineClassifier(keras.layers.Layer):
    """Outputs `cos(theta_ic)` between each embedding and each class centre.

    Holds the `[features, num_classes]` class-centre weights that
    `ArcFaceLoss` trains: they are a layer weight, so Keras' optimizer updates
    them with the model's, and under `tf.distribute` they are created, like
    every weight made in `strategy.scope()`, as mirrored variables (one copy
    per replica, updated with the all-reduced gradient). Embeddings and
    centres are L2-normalised, so the output is in `[-1, 1]`; it is computed
    in at least float32.

    Args:
        num_classes: Number of classes (centres), a positive integer.
        kernel_initializer: Initializer of the centres. Defaults to
            `"glorot_uniform"`.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Example:

    >>> import keras
    >>> from tensorflow_similarity.layers import CosineClassifier
    >>> inputs = keras.Input((8,))
    >>> embedding = keras.layers.Dense(4)(inputs)
    >>> model = keras.Model(inputs, CosineClassifier(10)(embedding))
    >>> model.output.shape
    (None, 10)
    """

    def __init__(self, num_classes: int, kernel_initializer: Any = "glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.num_classes = check_int(
            "num_classes", num_classes, minimum=1, owner="CosineClassifier"
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape: tuple[int | None, ...]) -> None:
        self.kernel = self.add_weight(
            name="centres",
            shape=(input_shape[-1], self.num_classes),
            initializer=self.kernel_initializer,
        )

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        embeddings = l2_normalize(tf.cast(inputs, dtype), axis=1)
        centres = l2_normalize(tf.cast(self.kernel, dtype), axis=0)
        return tf.matmul(embeddings, centres)

    def compute_output_shape(self, input_shape: tuple[int | None, ...]) -> tuple[int | None, ...]:
        return (input_shape[0], self.num_classes)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            num_classes=self.num_classes,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
        )
        return config
