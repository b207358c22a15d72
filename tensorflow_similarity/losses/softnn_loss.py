"""Soft nearest neighbour loss over the global batch."""

from __future__ import annotations

import warnings
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_number
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.losses.metric_loss import MetricLoss, anchor_terms
from tensorflow_similarity.losses.mining import masked_logsumexp


@keras.saving.register_keras_serializable(package="Similarity")
class SoftNearestNeighborLoss(MetricLoss):
    """Soft nearest neighbour loss: how much of each anchor's neighbourhood is its class.

    From Frosst, Papernot & Hinton, "Analyzing and Improving Representations
    with the Soft Nearest Neighbor Loss", ICML 2019
    (https://arxiv.org/abs/1902.01889). For anchor `a`, with `T` the
    temperature and the sums over the other samples `j != a`:

        l_a = -log( sum_{j: y_j = y_a} exp(-d_aj / T) / sum_j exp(-d_aj / T) )

    computed as a difference of log-sum-exps, so that it stays finite when
    every `exp(-d / T)` underflows (0.17 added `1e-9` inside the log instead,
    a difference below `1e-9` relative to the ratio otherwise). Anchors
    without a positive contribute 0.

    Across replicas: labels and embeddings are gathered; every anchor's
    neighbourhood is the whole global batch.

    Args:
        distance: Distance between embeddings. Defaults to `"sql2"`.
        temperature: Temperature `T > 0`. Defaults to `1.0`.
        name: Name of the loss. Defaults to `"SoftNearestNeighborLoss"`.
        reduction: See `MetricLoss`.
        dtype: See `MetricLoss`.
        remove_diagonal: Accepted for 0.17's signature; the anchor is never
            in its own neighbourhood. 0.17 excluded it from both sums either
            way, and `False` only added `-log(1e-9) = 20.72` for each anchor
            alone in its class (a constant without gradient); here such an
            anchor contributes 0 whatever the value, and `False` warns.
            Defaults to `True`.

    Returns (when called):
        A scalar, or per-anchor values with `reduction="none"`.

    Raises:
        ValueError: On a temperature that is not a positive number, an unknown
            distance, or bad inputs.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import SoftNearestNeighborLoss
    >>> labels = np.array([0, 0, 1, 1])
    >>> embeddings = np.array([[0.0, 0.0], [0.0, 1.0], [3.0, 0.0], [3.0, 1.0]])
    >>> float(SoftNearestNeighborLoss()(labels, embeddings)) < 0.01
    True
    """

    def __init__(
        self,
        distance: Distance | str = "sql2",
        temperature: float = 1.0,
        name: str = "SoftNearestNeighborLoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
        remove_diagonal: bool = True,
    ) -> None:
        owner = type(self).__name__
        self.temperature = check_number("temperature", temperature, positive=True, owner=owner)
        # Kept for get_config only: the loss never counts the anchor itself.
        self.remove_diagonal_017 = check_bool("remove_diagonal", remove_diagonal, owner=owner)
        if not remove_diagonal:
            warnings.warn(
                "SoftNearestNeighborLoss(remove_diagonal=False) computes the same loss as "
                "remove_diagonal=True: 0.17 then added -log(1e-9) = 20.72 to the term of "
                "each anchor alone in its class, a constant with no gradient; here those "
                "anchors contribute 0. Drop remove_diagonal.",
                UserWarning,
                stacklevel=2,
            )
        super().__init__(distance=distance, name=name, reduction=reduction, dtype=dtype)

    def per_anchor_loss(self, query_labels, query_embeddings, key_labels, key_embeddings):
        logits = -self.distance(query_embeddings, key_embeddings) / self.temperature
        positive_mask, negative_mask = self.pair_masks(query_labels, key_labels)
        others = tf.logical_or(positive_mask, negative_mask)
        terms = masked_logsumexp(logits, others) - masked_logsumexp(logits, positive_mask)
        has_positive = tf.reduce_any(positive_mask, axis=1)
        return tf.where(has_positive, terms, tf.zeros_like(terms))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            self.distance_config(),
            temperature=self.temperature,
            remove_diagonal=self.remove_diagonal_017,
        )
        return config


@keras.saving.register_keras_serializable(package="Similarity")
def soft_nn_loss(
    query_labels: Any,
    query_embeddings: Any,
    key_labels: Any,
    key_embeddings: Any,
    distance: Distance | str,
    temperature: float,
    remove_diagonal: bool = True,
) -> tf.Tensor:
    """Returns the `[n]` per-anchor terms of `SoftNearestNeighborLoss` (0.17's functional form).

    Args:
        query_labels: `[n]` or `[n, 1]` integer labels of the anchors.
        query_embeddings: `[n, d]` anchor embeddings.
        key_labels: `[m]` or `[m, 1]` labels of the keys, whose first `n`
            rows are the anchors.
        key_embeddings: `[m, d]` key embeddings.
        distance: A `Distance` or its name.
        temperature: Temperature `> 0`.
        remove_diagonal: See `SoftNearestNeighborLoss`. Defaults to `True`.
    """
    loss = SoftNearestNeighborLoss(distance, temperature, remove_diagonal=remove_diagonal)
    return anchor_terms(loss, query_labels, query_embeddings, key_labels, key_embeddings)
