"""Supervised contrastive loss over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.metric_loss import MetricLoss
from tensorflow_similarity.losses.mining import masked_logsumexp


@keras.saving.register_keras_serializable(package="Similarity")
class SupConLoss(MetricLoss):
    """Supervised contrastive loss (SupCon, the paper's `L_out`).

    From Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020
    (https://arxiv.org/abs/2004.11362). With L2-normalised embeddings `u`,
    `s_aj = <u_a, u_j> / temperature`, `P(a)` the other samples of `a`'s class
    and `A(a)` all the other samples:

        l_a = -(1 / |P(a)|) sum_{p in P(a)} log( exp(s_ap) / sum_{j in A(a)} exp(s_aj) )

    Anchors without a positive contribute 0. For two augmented views per
    image, pass both views' embeddings as rows, each with the image's label.

    Across replicas: labels and embeddings are gathered; every anchor's
    positives and contrast set range over the whole global batch.

    Args:
        temperature: Softmax temperature `> 0`. Defaults to `0.07`.
        name: Name of the loss. Defaults to `"SupConLoss"`.
        reduction: See `MetricLoss`.
        dtype: See `MetricLoss`.

    Returns (when called):
        A scalar, or per-anchor values with `reduction="none"`.

    Raises:
        ValueError: On a temperature that is not a positive number, or bad
            inputs.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import SupConLoss
    >>> labels = np.array([0, 0, 1, 1])
    >>> embeddings = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    >>> float(SupConLoss(temperature=1.0)(labels, embeddings)) > 0
    True
    """

    def __init__(
        self,
        temperature: float = 0.07,
        name: str = "SupConLoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        self.temperature = check_number(
            "temperature", temperature, positive=True, owner=type(self).__name__
        )
        super().__init__(distance=None, name=name, reduction=reduction, dtype=dtype)

    def per_anchor_loss(self, query_labels, query_embeddings, key_labels, key_embeddings):
        queries = l2_normalize(query_embeddings, axis=1)
        keys = l2_normalize(key_embeddings, axis=1)
        logits = tf.matmul(queries, keys, transpose_b=True) / self.temperature
        positive_mask, negative_mask = self.pair_masks(query_labels, key_labels)
        log_norm = masked_logsumexp(logits, tf.logical_or(positive_mask, negative_mask))
        positives = tf.cast(positive_mask, logits.dtype)
        count = tf.reduce_sum(positives, axis=1)
        mean_positive = tf.math.divide_no_nan(tf.reduce_sum(logits * positives, axis=1), count)
        terms = log_norm - mean_positive
        return tf.where(count > 0, terms, tf.zeros_like(terms))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["temperature"] = self.temperature
        return config
