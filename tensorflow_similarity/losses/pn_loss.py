"""PN loss: a triplet loss whose positive must also be far from the negative."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.distances import Distance
from tensorflow_similarity.losses.metric_loss import anchor_terms
from tensorflow_similarity.losses.triplet_loss import TripletLoss


@keras.saving.register_keras_serializable(package="Similarity")
class PNLoss(TripletLoss):
    """Positive-negative loss: a triplet loss with `d_an = min(d_an, d_pn)`.

    From the ivis paper, Szubert, Cole, Monaco & Drozdov,
    "Structure-preserving visualisation of high dimensional single-cell
    datasets", Sci. Rep. 9, 8914 (2019)
    (https://doi.org/10.1038/s41598-019-45301-0). With the mined positive `p`
    and negative `n` of anchor `a`, the negative distance of `TripletLoss`'s
    formula becomes `min(d(a, n), d(p, n))`, so that the positive too is
    pushed away from the negative. Mining and margins are `TripletLoss`'s.

    Across replicas: labels and embeddings are gathered; positives and
    negatives are mined from the whole global batch.

    Args:
        distance: Distance between embeddings. Defaults to `"cosine"`.
        positive_mining_strategy: `"hard"` (default) or `"easy"`.
        negative_mining_strategy: `"semi-hard"` (default), `"hard"` or
            `"easy"`.
        margin: `None` (default) for the soft margin, else the hinge margin.
        name: Name of the loss. Defaults to `"PNLoss"`.
        reduction: See `MetricLoss`.
        dtype: See `MetricLoss`.
        remove_diagonal: 0.17's switch: `False` counts each anchor as one of
            its own positives (at distance 0). Defaults to `True`.

    Returns (when called):
        A scalar, or per-anchor values with `reduction="none"`.

    Raises:
        ValueError: As `TripletLoss`.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import PNLoss
    >>> labels = np.array([0, 0, 1, 1])
    >>> embeddings = np.array([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0], [0.1, 1.0]])
    >>> float(PNLoss(margin=1.0)(labels, embeddings)) > 0
    True
    """

    def __init__(
        self,
        distance: Distance | str = "cosine",
        positive_mining_strategy: str = "hard",
        negative_mining_strategy: str = "semi-hard",
        margin: float | None = None,
        name: str = "PNLoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
        remove_diagonal: bool = True,
    ) -> None:
        super().__init__(
            distance=distance,
            positive_mining_strategy=positive_mining_strategy,
            negative_mining_strategy=negative_mining_strategy,
            margin=margin,
            name=name,
            reduction=reduction,
            dtype=dtype,
            remove_diagonal=remove_diagonal,
        )

    def negative_distance(self, d_an, key_embeddings, positive, negative):
        positives = tf.gather(key_embeddings, positive)
        negatives = tf.gather(key_embeddings, negative)
        # Row i of the [n, n] matrix holds d(p_i, n_i) on its diagonal; the
        # distance objects only compute pairwise matrices.
        d_pn = tf.linalg.diag_part(self.distance(positives, negatives))
        return tf.minimum(d_an, d_pn)


@keras.saving.register_keras_serializable(package="Similarity")
def pn_loss(
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
    """Returns the `[n, 1]` per-anchor terms of `PNLoss` (0.17's functional form).

    Args:
        query_labels: `[n]` or `[n, 1]` integer labels of the anchors.
        query_embeddings: `[n, d]` anchor embeddings.
        key_labels: `[m]` or `[m, 1]` labels of the keys, whose first `n`
            rows are the anchors.
        key_embeddings: `[m, d]` key embeddings.
        distance: A `Distance` or its name.
        remove_diagonal: See `PNLoss`. Defaults to `True`.
        positive_mining_strategy: See `PNLoss`. Defaults to `"hard"`.
        negative_mining_strategy: See `PNLoss`. Defaults to `"semi-hard"`.
        margin: See `PNLoss`. Defaults to `None` (soft margin).
    """
    loss = PNLoss(
        distance,
        positive_mining_strategy,
        negative_mining_strategy,
        margin,
        remove_diagonal=remove_diagonal,
    )
    terms = anchor_terms(loss, query_labels, query_embeddings, key_labels, key_embeddings)
    return terms[:, tf.newaxis]
