"""Triplet loss with online mining over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_choice, check_number
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.losses.metric_loss import MetricLoss, anchor_terms
from tensorflow_similarity.losses.mining import (
    NEGATIVE_STRATEGIES,
    POSITIVE_STRATEGIES,
    mine_negatives,
    mine_positives,
)


@keras.saving.register_keras_serializable(package="Similarity")
class TripletLoss(MetricLoss):
    """Triplet loss, each anchor with one mined positive and one mined negative.

    From Schroff, Kalenichenko & Philbin, "FaceNet: A Unified Embedding for
    Face Recognition and Clustering", CVPR 2015
    (https://arxiv.org/abs/1503.03832), with the batch-hard variant and the
    soft margin of Hermans, Beyer & Leibe, "In Defense of the Triplet Loss
    for Person Re-Identification" (https://arxiv.org/abs/1703.07737). For
    anchor `a` with mined positive distance `d_ap` and negative distance
    `d_an`:

        l_a = log(1 + exp(d_ap - d_an))          if margin is None (soft)
        l_a = max(d_ap - d_an + margin, 0)       otherwise

    and the loss is the mean of `l_a` over the anchors (those without a
    positive or a negative contribute 0, see `MetricLoss`).

    Across replicas: labels and embeddings are gathered, so positives and
    negatives are mined from the whole global batch.

    Args:
        distance: Distance between embeddings (a `Distance` or a name such as
            `"cosine"`, `"l2"`). Defaults to `"cosine"`.
        positive_mining_strategy: `"hard"` (farthest positive, default) or
            `"easy"` (closest positive).
        negative_mining_strategy: `"semi-hard"` (default: the closest negative
            farther than the hardest positive, else the farthest negative),
            `"hard"` (closest negative) or `"easy"` (farthest negative).
        margin: `None` (default) for the soft margin, else the hinge margin.
        name: Name of the loss. Defaults to `"TripletLoss"`.
        reduction: See `MetricLoss`.
        dtype: See `MetricLoss`.
        remove_diagonal: 0.17's switch: `False` counts each anchor as one of
            its own positives (at distance 0). Defaults to `True`.

    Returns (when called):
        A scalar, or per-anchor values with `reduction="none"`.

    Raises:
        ValueError: On an unknown distance or strategy, a margin that is not a
            finite number, or bad inputs (see `MetricLoss`).

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import TripletLoss
    >>> labels = np.array([0, 0, 1, 1])
    >>> embeddings = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    >>> float(TripletLoss(margin=1.0)(labels, embeddings)) > 0
    True
    """

    def __init__(
        self,
        distance: Distance | str = "cosine",
        positive_mining_strategy: str = "hard",
        negative_mining_strategy: str = "semi-hard",
        margin: float | None = None,
        name: str = "TripletLoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
        remove_diagonal: bool = True,
    ) -> None:
        owner = type(self).__name__
        self.remove_diagonal = check_bool("remove_diagonal", remove_diagonal, owner=owner)
        self.positive_mining_strategy = check_choice(
            "positive_mining_strategy", positive_mining_strategy, POSITIVE_STRATEGIES, owner=owner
        )
        self.negative_mining_strategy = check_choice(
            "negative_mining_strategy", negative_mining_strategy, NEGATIVE_STRATEGIES, owner=owner
        )
        self.margin = None if margin is None else check_number("margin", margin, owner=owner)
        super().__init__(distance=distance, name=name, reduction=reduction, dtype=dtype)

    def per_anchor_loss(self, query_labels, query_embeddings, key_labels, key_embeddings):
        distances = self.distance(query_embeddings, key_embeddings)
        positive_mask, negative_mask = self.pair_masks(query_labels, key_labels)
        d_ap, positive, has_positive = mine_positives(
            distances, positive_mask, self.positive_mining_strategy
        )
        d_an, negative, has_negative = mine_negatives(
            distances, positive_mask, negative_mask, self.negative_mining_strategy
        )
        d_an = self.negative_distance(d_an, key_embeddings, positive, negative)
        gap = d_ap - d_an
        terms = tf.nn.softplus(gap) if self.margin is None else tf.nn.relu(gap + self.margin)
        return tf.where(tf.logical_and(has_positive, has_negative), terms, tf.zeros_like(terms))

    def negative_distance(
        self, d_an: tf.Tensor, key_embeddings: tf.Tensor, positive: tf.Tensor, negative: tf.Tensor
    ) -> tf.Tensor:
        """Returns the negative distance the loss uses: the anchor's, here."""
        return d_an

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            self.distance_config(),
            positive_mining_strategy=self.positive_mining_strategy,
            negative_mining_strategy=self.negative_mining_strategy,
            margin=self.margin,
            remove_diagonal=self.remove_diagonal,
        )
        return config


@keras.saving.register_keras_serializable(package="Similarity")
def triplet_loss(
    query_labels: Any,
    query_embeddings: Any,
    key_labels: Any,
    key_embeddings: Any,
    distance: Distance | str,
    remove_diagonal: bool = True,
    positive_mining_strategy: str = "hard",
    negative_mining_strategy: str = "semi-hard",
    margin: float | None = None,
) -> tf.Tensor:
    """Returns the `[n, 1]` per-anchor terms of `TripletLoss` (0.17's functional form).

    `MetricLoss(triplet_loss, distance="cosine")` is `TripletLoss()`.

    Args:
        query_labels: `[n]` or `[n, 1]` integer labels of the anchors.
        query_embeddings: `[n, d]` anchor embeddings.
        key_labels: `[m]` or `[m, 1]` labels of the keys, whose first `n`
            rows are the anchors.
        key_embeddings: `[m, d]` key embeddings.
        distance: A `Distance` or its name.
        remove_diagonal: See `TripletLoss`. Defaults to `True`.
        positive_mining_strategy: See `TripletLoss`. Defaults to `"hard"`.
        negative_mining_strategy: See `TripletLoss`. Defaults to `"semi-hard"`.
        margin: See `TripletLoss`. Defaults to `None` (soft margin).
    """
    loss = TripletLoss(
        distance,
        positive_mining_strategy,
        negative_mining_strategy,
        margin,
        remove_diagonal=remove_diagonal,
    )
    terms = anchor_terms(loss, query_labels, query_embeddings, key_labels, key_embeddings)
    return terms[:, tf.newaxis]
