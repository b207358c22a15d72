"""Multi-similarity loss over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_number
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.losses.metric_loss import MetricLoss, anchor_terms
from tensorflow_similarity.losses.mining import masked_logsumexp, masked_max, masked_min


@keras.saving.register_keras_serializable(package="Similarity")
class MultiSimilarityLoss(MetricLoss):
    """Multi-similarity loss: pair mining by margin, then soft weighting.

    From Wang et al., "Multi-Similarity Loss with General Pair Weighting for
    Deep Metric Learning", CVPR 2019 (https://arxiv.org/abs/1904.06627),
    written for distances as 0.17 does. For anchor `a`, keep the positives
    with `d_ap > min_n d_an - epsilon` and the negatives with
    `d_an < max_p d_ap + epsilon`; with `x = d + lmda - center`:

        l_a = (1 / alpha) log(1 + sum_kept_p exp(alpha * x_ap))
            + (1 / beta)  log(1 + sum_kept_n exp(-beta * x_an))

    (for cosine, `center = 1` makes `-x` the paper's `S - lambda`). Anchors
    left without a kept positive or a kept negative contribute 0. An anchor
    with a NaN distance to any key (a NaN or infinite embedding, with most
    distances) gets a NaN term, so such a batch has a NaN loss, as with the
    other losses, rather than one that silently leaves out its pairs.

    Across replicas: labels and embeddings are gathered; mining and weighting
    range over the whole global batch.

    Args:
        distance: Distance between embeddings. Defaults to `"cosine"`.
        alpha: Positive scale `> 0`. Defaults to `2.0`.
        beta: Negative scale `> 0`. Defaults to `40.0`.
        epsilon: Mining margin. Defaults to `0.1`.
        lmda: Distance offset `lambda`. Defaults to `0.5`.
        center: Expected distance, subtracted before weighting (1 for cosine;
            data-dependent for L1/L2). Defaults to `1.0`.
        name: Name of the loss. Defaults to `"MultiSimilarityLoss"`.
        reduction: See `MetricLoss`.
        dtype: See `MetricLoss`.
        remove_diagonal: 0.17's switch: `False` counts each anchor as one of
            its own positives (at distance 0). Defaults to `True`.

    Returns (when called):
        A scalar, or per-anchor values with `reduction="none"`.

    Raises:
        ValueError: On `alpha` or `beta` not positive, other arguments not
            finite numbers, an unknown distance, or bad inputs.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import MultiSimilarityLoss
    >>> labels = np.array([0, 0, 1, 1])
    >>> embeddings = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> float(MultiSimilarityLoss()(labels, embeddings)) >= 0
    True
    """

    def __init__(
        self,
        distance: Distance | str = "cosine",
        alpha: float = 2.0,
        beta: float = 40.0,
        epsilon: float = 0.1,
        lmda: float = 0.5,
        center: float = 1.0,
        name: str = "MultiSimilarityLoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
        remove_diagonal: bool = True,
    ) -> None:
        owner = type(self).__name__
        self.remove_diagonal = check_bool("remove_diagonal", remove_diagonal, owner=owner)
        self.alpha = check_number("alpha", alpha, positive=True, owner=owner)
        self.beta = check_number("beta", beta, positive=True, owner=owner)
        self.epsilon = check_number("epsilon", epsilon, owner=owner)
        self.lmda = check_number("lmda", lmda, owner=owner)
        self.center = check_number("center", center, owner=owner)
        super().__init__(distance=distance, name=name, reduction=reduction, dtype=dtype)

    def per_anchor_loss(self, query_labels, query_embeddings, key_labels, key_embeddings):
        d = self.distance(query_embeddings, key_embeddings)
        positive_mask, negative_mask = self.pair_masks(query_labels, key_labels)
        closest_negative, _, _ = masked_min(d, negative_mask)
        farthest_positive, _, _ = masked_max(d, positive_mask)
        kept_p = tf.logical_and(positive_mask, d > (closest_negative - self.epsilon)[:, tf.newaxis])
        kept_n = tf.logical_and(
            negative_mask, d < (farthest_positive + self.epsilon)[:, tf.newaxis]
        )
        x = d + self.lmda - self.center
        terms = (
            masked_logsumexp(self.alpha * x, kept_p, plus_one=True) / self.alpha
            + masked_logsumexp(-self.beta * x, kept_n, plus_one=True) / self.beta
        )
        valid = tf.logical_and(tf.reduce_any(kept_p, axis=1), tf.reduce_any(kept_n, axis=1))
        terms = tf.where(valid, terms, tf.zeros_like(terms))
        # Mining keeps pairs by comparing distances, and any comparison with NaN
        # is false: a NaN distance would drop its pairs (a NaN anchor's whole row)
        # and leave a finite loss with NaN gradients. Return NaN, as the other
        # losses do; a finite batch takes the other branch, value and gradient.
        has_nan = tf.reduce_any(tf.math.is_nan(d), axis=1)
        return tf.where(has_nan, tf.constant(float("nan"), terms.dtype), terms)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            self.distance_config(),
            alpha=self.alpha,
            beta=self.beta,
            epsilon=self.epsilon,
            lmda=self.lmda,
            center=self.center,
            remove_diagonal=self.remove_diagonal,
        )
        return config


@keras.saving.register_keras_serializable(package="Similarity")
def multisimilarity_loss(
    query_labels: Any,
    query_embeddings: Any,
    key_labels: Any,
    key_embeddings: Any,
    distance: Distance | str,
    remove_diagonal: bool = True,
    alpha: float = 2.0,
    beta: float = 40.0,
    epsilon: float = 0.1,
    lmda: float = 0.5,
    center: float = 1.0,
) -> tf.Tensor:
    """Returns the `[n, 1]` per-anchor terms of `MultiSimilarityLoss` (0.17's functional form).

    Args:
        query_labels: `[n]` or `[n, 1]` integer labels of the anchors.
        query_embeddings: `[n, d]` anchor embeddings.
        key_labels: `[m]` or `[m, 1]` labels of the keys, whose first `n`
            rows are the anchors.
        key_embeddings: `[m, d]` key embeddings.
        distance: A `Distance` or its name.
        remove_diagonal: See `MultiSimilarityLoss`. Defaults to `True`.
        alpha: Positive scale. Defaults to `2.0`.
        beta: Negative scale. Defaults to `40.0`.
        epsilon: Mining margin. Defaults to `0.1`.
        lmda: Weighting offset. Defaults to `0.5`.
        center: Expected distance. Defaults to `1.0`.
    """
    loss = MultiSimilarityLoss(
        distance, alpha, beta, epsilon, lmda, center, remove_diagonal=remove_diagonal
    )
    terms = anchor_terms(loss, query_labels, query_embeddings, key_labels, key_embeddings)
    return terms[:, tf.newaxis]
