"""`DistanceMetric`: mined distances between labelled embeddings, over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_choice
from tensorflow_similarity.collectives import gather_global_batch
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.losses.mining import masked_max, masked_min, pair_masks

ANCHORS = ("positive", "negative")
AGGREGATES = ("mean", "avg", "max", "min", "sum")
POSITIVE_MINING = ("hard", "semi-hard", "easy")
NEGATIVE_MINING = ("hard", "easy")


def batch_labels_and_embeddings(labels: Any, embeddings: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """Checks `(labels, embeddings)` and gathers them over the replicas.

    Args:
        labels: `[n]` or `[n, 1]` integer class labels.
        embeddings: `[n, d]` embeddings.

    Returns:
        The global batch's `[N]` int64 labels and `[N, d]` float32 (or wider)
        embeddings, identical on every replica.

    Raises:
        ValueError: For embeddings that are not 2-D or labels of another length.
    """
    embeddings = tf.convert_to_tensor(embeddings)
    if len(embeddings.shape) != 2:
        raise ValueError(
            f"Distance metrics expect embeddings of shape [batch, features]; received shape "
            f"{embeddings.shape}. Flatten or pool the embeddings first."
        )
    embeddings = tf.cast(embeddings, keras.backend.result_type(embeddings.dtype, "float32"))
    labels = tf.reshape(tf.cast(tf.convert_to_tensor(labels), tf.int64), [-1])
    if labels.shape[0] is not None and embeddings.shape[0] is not None:
        if labels.shape[0] != embeddings.shape[0]:
            raise ValueError(
                f"Distance metrics need one label per embedding; received {labels.shape[0]} "
                f"labels for {embeddings.shape[0]} embeddings."
            )
    (embeddings,) = gather_global_batch(embeddings)
    (labels,) = gather_global_batch(labels)
    return labels, embeddings


@keras.saving.register_keras_serializable(package="Similarity")
class DistanceMetric(keras.metrics.Metric):
    """Mined distances between labelled embeddings, aggregated over the batch's anchors.

    For every anchor of the batch, the distance to one positive (same label)
    or one negative (other label), mined as 0.17 does: the hard positive is
    the farthest, the easy (or semi-hard) one the closest; the hard negative
    is the closest, the easy one the farthest. The anchors' distances are then
    aggregated (`mean`/`avg`, `max`, `min` or `sum`), over the anchors that
    have such a partner (0 when none has). The metric reports the mean of
    that per-batch value over the batches seen since the last reset (the
    epoch, in `fit`), as Keras' loss is reported. Use it in
    `compile(metrics=[...])` of a model whose output is the embedding.

    Across replicas: the labels and embeddings are gathered from every
    replica, so each batch value is that of the global batch, identical on
    every replica (positives and negatives on other replicas count), as one
    device holding the whole batch would compute it.

    Differences from 0.17, which reported the last batch's value, took the
    farthest negative as the hard one, and counted anchors without a partner
    as distance 0 in the aggregate.

    Args:
        distance: A `Distance`, its name (`"cosine"`, `"l2"`, ...) or config.
        aggregate: `"mean"` (default) or `"avg"`, `"max"`, `"min"`, `"sum"`.
        anchor: `"positive"` (default) or `"negative"`: which partner's
            distance is measured.
        name: The metric's name; defaults to `"<aggregate>_<pos|neg>"`.
        positive_mining_strategy: `"hard"` (default), `"semi-hard"` or
            `"easy"` (the latter two: the closest positive).
        negative_mining_strategy: `"hard"` (default, the closest negative) or
            `"easy"` (the farthest).
        **kwargs: `keras.metrics.Metric` arguments (`dtype`).

    Raises:
        ValueError: For an unknown distance, aggregate, anchor or strategy.

    Example:

    In `compile(metrics=[DistanceMetric("cosine")])`, or by hand: two classes
    whose hardest positives are 1, 1, 2 and 2 apart (Euclidean):

    >>> from tensorflow_similarity.training_metrics import DistanceMetric
    >>> metric = DistanceMetric("euclidean")
    >>> metric.update_state([0, 0, 1, 1], [[0.0, 0.0], [0.0, 1.0], [3.0, 0.0], [3.0, 2.0]])
    >>> metric.name, float(metric.result())
    ('mean_pos', 1.5)
    """

    def __init__(
        self,
        distance: str | Distance | dict[str, Any] = "cosine",
        aggregate: str = "mean",
        anchor: str = "positive",
        name: str | None = None,
        positive_mining_strategy: str = "hard",
        negative_mining_strategy: str = "hard",
        **kwargs: Any,
    ) -> None:
        check_choice("aggregate", aggregate, AGGREGATES, owner="DistanceMetric")
        check_choice("anchor", anchor, ANCHORS, owner="DistanceMetric")
        check_choice(
            "positive_mining_strategy",
            positive_mining_strategy,
            POSITIVE_MINING,
            owner="DistanceMetric",
        )
        check_choice(
            "negative_mining_strategy",
            negative_mining_strategy,
            NEGATIVE_MINING,
            owner="DistanceMetric",
        )
        if isinstance(distance, dict):
            distance = keras.saving.deserialize_keras_object(distance)
        self.distance = distance_canonicalizer(distance)
        super().__init__(name=name or f"{aggregate}_{anchor[:3]}", **kwargs)
        self.aggregate = aggregate
        self.anchor = anchor
        self.positive_mining_strategy = positive_mining_strategy
        self.negative_mining_strategy = negative_mining_strategy
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.batches = self.add_variable(shape=(), initializer="zeros", name="batches")

    def batch_value(self, labels: Any, embeddings: Any) -> tf.Tensor:
        """Returns the metric of one (global) batch, without updating the state.

        Args:
            labels: `[n]` or `[n, 1]` integer class labels.
            embeddings: `[n, d]` embeddings.

        Returns:
            A float32 scalar.
        """
        labels, embeddings = batch_labels_and_embeddings(labels, embeddings)
        distances = self.distance(embeddings, embeddings)
        positive, negative = pair_masks(labels, labels)
        if self.anchor == "positive":
            pick = masked_max if self.positive_mining_strategy == "hard" else masked_min
            values, _, found = pick(distances, positive)
        else:
            pick = masked_min if self.negative_mining_strategy == "hard" else masked_max
            values, _, found = pick(distances, negative)
        values = tf.boolean_mask(values, found)
        if self.aggregate in ("mean", "avg"):
            value = tf.math.divide_no_nan(
                tf.reduce_sum(values), tf.cast(tf.size(values), values.dtype)
            )
        elif self.aggregate == "sum":
            value = tf.reduce_sum(values)
        else:
            reduce = tf.reduce_max if self.aggregate == "max" else tf.reduce_min
            value = tf.cond(
                tf.size(values) > 0, lambda: reduce(values), lambda: tf.zeros([], values.dtype)
            )
        return tf.cast(value, tf.float32)

    def update_state(self, labels: Any, embeddings: Any, sample_weight: Any = None) -> None:
        """Adds the batch's value (Keras passes `y_true` as `labels`, `y_pred` as `embeddings`).

        Raises:
            ValueError: If `sample_weight` is given (the value couples the batch).
        """
        if sample_weight is not None:
            raise ValueError(
                f"{type(self).__name__} does not accept sample_weight: its value couples all "
                "the batch's embeddings. Drop sample_weight / weighted_metrics for it."
            )
        self.total.assign_add(self.batch_value(labels, embeddings))
        self.batches.assign_add(1.0)

    def result(self) -> tf.Tensor:
        return tf.math.divide_no_nan(self.total, self.batches)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "distance": keras.saving.serialize_keras_object(self.distance),
                "aggregate": self.aggregate,
                "anchor": self.anchor,
                "positive_mining_strategy": self.positive_mining_strategy,
                "negative_mining_strategy": self.negative_mining_strategy,
            }
        )
        return config
