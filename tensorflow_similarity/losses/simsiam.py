"""SimSiam's negative cosine similarity, averaged over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.collectives import global_sum
from tensorflow_similarity.losses._global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class SimSiamLoss(GlobalBatchLoss):
    """Negative cosine similarity with a stop-gradient on the target (SimSiam).

    From Chen & He, "Exploring Simple Siamese Representation Learning", CVPR
    2021 (https://arxiv.org/abs/2011.10566). Called as `loss(p, z)` with the
    predictor output `p` of one view and the projector output `z` of the other:

        D(p, z) = -(1 / N) * sum_i  <p_i, sg(z_i)> / (||p_i|| * ||sg(z_i)||)

    where `sg` is the stop-gradient and `N` the global batch size. The model
    symmetrises: `0.5 * (loss(p1, z2) + loss(p2, z1))`. The value lies in
    `[-1, 1]`; no gradient reaches `z`.

    Across replicas: each replica's sum of cosines and sample count are
    all-reduced (the loss is a sum of per-sample terms, so nothing is
    gathered) and every replica returns the mean over the global batch; an
    empty global batch gives 0. See `GlobalBatchLoss` for the contract.

    Args:
        name: Name of the loss. Defaults to `"sim_siam_loss"`.
        reduction: Defaults to `"sum_over_batch_size"`; see `GlobalBatchLoss`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor.

    Raises:
        ValueError: On views that are not `[batch, features]` tensors of one
            shape, or when `sample_weight` is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import SimSiamLoss
    >>> p = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> z = np.array([[1.0, 0.0], [1.0, 0.0]])
    >>> float(SimSiamLoss()(p, z))
    -0.5
    """

    def __init__(
        self,
        name: str | None = "sim_siam_loss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        dtype = computation_dtype(y_true.dtype)
        p = tf.math.l2_normalize(tf.cast(y_true, dtype), axis=1)
        z = tf.math.l2_normalize(tf.stop_gradient(tf.cast(y_pred, dtype)), axis=1)
        cosines = tf.reduce_sum(p * z, axis=1)
        total = global_sum(tf.stack([tf.reduce_sum(cosines), tf.cast(tf.shape(cosines)[0], dtype)]))
        return -tf.math.divide_no_nan(total[0], total[1])
