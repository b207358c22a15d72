"""Circle loss over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_number
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.losses.metric_loss import MetricLoss, anchor_terms
from tensorflow_similarity.losses.mining import masked_logsumexp


@keras.saving.register_keras_serializable(package="Similarity")
class CircleLoss(MetricLoss):
    """Circle loss, with self-paced weights on every positive and negative pair.

    From Sun et al., "Circle Loss: A Unified Perspective of Pair Similarity
    Optimization", CVPR 2020 (https://arxiv.org/abs/2002.10857), written for
    a distance `d` in `[0, 2]` (cosine: similarity `s = 1 - d`) with margin
    `m`. For anchor `a`, over its positives `p` and negatives `n`:

        w_p = max(d_ap + m, 0),      z_p = -gamma * w_p * (m - d_ap)
        w_n = max(1 + m - d_an, 0),  z_n =  gamma * w_n * (1 - m - d_an)
        l_a = log(1 + sum_p exp(z_p) * sum_n exp(z_n))

    the paper's equation (4), with `S_p = sum_p exp(z_p)` and
    `S_n = sum_n exp(z_n)`: `log(1 + S_p * S_n)`. 0.17 computed
    `log(1 + S_p) + log(1 + S_n) = log(1 + S_p + S_n + S_p * S_n)`, larger by
    `log(1 + (S_p + S_n) / (1 + S_p * S_n))`; the two agree when both sums are
    large (hard pairs) and differ most on easy batches. By default the
    gradient flows through the weights `w` too, as in 0.17;
    `detach_weights=True` treats them as constants of each step (no
    gradient through `w`), as pytorch-metric-learning and most reference
    implementations do: the same value, a different gradient. Anchors
    without a positive or without a negative contribute 0.

    Across replicas: labels and embeddings are gathered; every anchor's pairs
    range over the whole global batch.

    Args:
        distance: Distance between embeddings, expected in `[0, 2]`. Defaults
            to `"cosine"`.
        gamma: Scale `> 0`. Defaults to `80.0`.
        margin: Relaxation margin `m`. Defaults to `0.4`.
        name: Name of the loss. Defaults to `"CircleLoss"`.
        reduction: See `MetricLoss`.
        dtype: See `MetricLoss`.
        remove_diagonal: 0.17's switch: `False` counts each anchor as one of
            its own positives (at distance 0). Defaults to `True`.
        detach_weights: Whether the weights `w_p`, `w_n` are constants for
            the gradient. Defaults to `False` (0.17's gradient).

    Returns (when called):
        A scalar, or per-anchor values with `reduction="none"`.

    Raises:
        ValueError: On a `gamma` that is not a positive number, a `margin`
            that is not a finite number, an unknown distance, or bad inputs.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import CircleLoss
    >>> labels = np.array([0, 0, 1, 1])
    >>> embeddings = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    >>> float(CircleLoss()(labels, embeddings)) >= 0
    True
    """

    def __init__(
        self,
        distance: Distance | str = "cosine",
        gamma: float = 80.0,
        margin: float = 0.4,
        name: str = "CircleLoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
        remove_diagonal: bool = True,
        detach_weights: bool = False,
    ) -> None:
        owner = type(self).__name__
        self.remove_diagonal = check_bool("remove_diagonal", remove_diagonal, owner=owner)
        self.detach_weights = check_bool("detach_weights", detach_weights, owner=owner)
        self.gamma = check_number("gamma", gamma, positive=True, owner=owner)
        self.margin = check_number("margin", margin, owner=owner)
        super().__init__(distance=distance, name=name, reduction=reduction, dtype=dtype)

    def per_anchor_loss(self, query_labels, query_embeddings, key_labels, key_embeddings):
        d = self.distance(query_embeddings, key_embeddings)
        positive_mask, negative_mask = self.pair_masks(query_labels, key_labels)
        m = self.margin
        w_p, w_n = tf.nn.relu(d + m), tf.nn.relu(1.0 + m - d)
        if self.detach_weights:
            w_p, w_n = tf.stop_gradient(w_p), tf.stop_gradient(w_n)
        z_p = -self.gamma * w_p * (m - d)
        z_n = self.gamma * w_n * (1.0 - m - d)
        terms = tf.nn.softplus(
            masked_logsumexp(z_p, positive_mask) + masked_logsumexp(z_n, negative_mask)
        )
        valid = tf.logical_and(
            tf.reduce_any(positive_mask, axis=1), tf.reduce_any(negative_mask, axis=1)
        )
        return tf.where(valid, terms, tf.zeros_like(terms))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            self.distance_config(),
            gamma=self.gamma,
            margin=self.margin,
            remove_diagonal=self.remove_diagonal,
            detach_weights=self.detach_weights,
        )
        return config


@keras.saving.register_keras_serializable(package="Similarity")
def circle_loss(
    query_labels: Any,
    query_embeddings: Any,
    key_labels: Any,
    key_embeddings: Any,
    distance: Distance | str,
    remove_diagonal: bool = True,
    gamma: float = 80.0,
    margin: float = 0.4,
) -> tf.Tensor:
    """Returns the `[n, 1]` per-anchor terms of `CircleLoss` (0.17's functional form).

    The terms are the paper's `log(1 + S_p S_n)` (see `CircleLoss` for 0.17's
    larger value).

    Args:
        query_labels: `[n]` or `[n, 1]` integer labels of the anchors.
        query_embeddings: `[n, d]` anchor embeddings.
        key_labels: `[m]` or `[m, 1]` labels of the keys, whose first `n`
            rows are the anchors.
        key_embeddings: `[m, d]` key embeddings.
        distance: A `Distance` or its name, expected in `[0, 2]`.
        remove_diagonal: See `CircleLoss`. Defaults to `True`.
        gamma: Scale. Defaults to `80.0`.
        margin: Relaxation margin. Defaults to `0.4`.
    """
    loss = CircleLoss(distance, gamma, margin, remove_diagonal=remove_diagonal)
    terms = anchor_terms(loss, query_labels, query_embeddings, key_labels, key_embeddings)
    return terms[:, tf.newaxis]
