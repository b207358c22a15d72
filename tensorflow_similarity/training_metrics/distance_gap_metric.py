"""`DistanceGapMetric`: the gap between the closest negative and the farthest positive."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.distances import Distance
from tensorflow_similarity.training_metrics.distance_metric import DistanceMetric


@keras.saving.register_keras_serializable(package="Similarity")
class DistanceGapMetric(keras.metrics.Metric):
    """`|min_neg - max_pos|` of each (global) batch, averaged over the batches seen.

    `max_pos` is the largest distance between two embeddings of one class,
    `min_neg` the smallest between two classes (`DistanceMetric` with
    `aggregate="max"` and `aggregate="min", anchor="negative"`): the margin
    separating the classes in the batch. Computed over the global batch
    under `tf.distribute`, as `DistanceMetric` is.

    Args:
        distance: A `Distance`, its name or config. Defaults to `"cosine"`.
        name: The metric's name. Defaults to `"dist_gap"`.
        **kwargs: `keras.metrics.Metric` arguments (`dtype`).

    Example:

    In `compile(metrics=[DistanceGapMetric("cosine")])`, or by hand: two
    classes whose farthest positives are 2 apart and closest negatives 3
    (Euclidean):

    >>> from tensorflow_similarity.training_metrics import DistanceGapMetric
    >>> metric = DistanceGapMetric("euclidean")
    >>> metric.update_state([0, 0, 1, 1], [[0.0, 0.0], [0.0, 1.0], [3.0, 0.0], [3.0, 2.0]])
    >>> float(metric.result())
    1.0
    """

    def __init__(
        self,
        distance: str | Distance | dict[str, Any] = "cosine",
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(name=name or "dist_gap", **kwargs)
        self.max_pos = DistanceMetric(distance, aggregate="max")
        self.min_neg = DistanceMetric(distance, aggregate="min", anchor="negative")
        self.distance = self.max_pos.distance
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.batches = self.add_variable(shape=(), initializer="zeros", name="batches")

    def update_state(self, labels: Any, embeddings: Any, sample_weight: Any = None) -> None:
        """Adds the batch's gap (Keras passes `y_true` as `labels`, `y_pred` as `embeddings`)."""
        if sample_weight is not None:
            raise ValueError(
                "DistanceGapMetric does not accept sample_weight: its value couples all the "
                "batch's embeddings. Drop sample_weight / weighted_metrics for it."
            )
        gap = self.min_neg.batch_value(labels, embeddings) - self.max_pos.batch_value(
            labels, embeddings
        )
        self.total.assign_add(tf.abs(gap))
        self.batches.assign_add(1.0)

    def result(self) -> tf.Tensor:
        return tf.math.divide_no_nan(self.total, self.batches)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["distance"] = keras.saving.serialize_keras_object(self.distance)
        return config
