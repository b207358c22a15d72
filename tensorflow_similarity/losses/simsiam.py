"""SimSiam's negative cosine similarity, averaged over the global batch."""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_choice, check_number
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype

PROJECTION_TYPES = ("negative_cosine_sim", "cosine_distance", "angular_distance")


@keras.saving.register_keras_serializable(package="Similarity")
class SimSiamLoss(GlobalBatchLoss):
    """Negative cosine similarity with a stop-gradient on the target (SimSiam).

    From Chen & He, "Exploring Simple Siamese Representation Learning", CVPR
    2021 (https://arxiv.org/abs/2011.10566). Called as Keras losses are,
    `loss(y_true, y_pred)`: the target first, the projector output `z` of one
    view (its gradient is stopped here), the prediction second, the predictor
    output `p` of the other view:

        D(z, p) = -(1 / N) * sum_i  <sg(z_i), p_i> / (||sg(z_i)|| * ||p_i||)

    where `sg` is the stop-gradient and `N` the global batch size. The model
    symmetrises: `0.5 * (loss(z2, p1) + loss(z1, p2))`. The value lies in
    `[-1, 1]`; no gradient reaches `z`. `projection_type` replaces `-cos` by
    `1 - cos` or `arccos(cos) / pi` (cosines clipped to `[-1, 1]`), and
    `margin` is added to every sample's term.

    Across replicas: each replica computes its own samples' terms (nothing
    is gathered) and the reduction takes the mean over the global batch; an
    empty global batch gives 0. See `GlobalBatchLoss` for the contract.

    Args:
        projection_type: `"negative_cosine_sim"` (default, `-cos`),
            `"cosine_distance"` (`1 - cos`) or `"angular_distance"`
            (`arccos(cos) / pi`).
        margin: Constant added to each sample's term. Defaults to `0.0`
            (tensorflow-similarity 0.17 added 0.001; a constant changes no
            gradient).
        reduction: Defaults to `"sum_over_batch_size"`; `"none"` or `None`
            returns the `[batch]` per-sample terms. See `GlobalBatchLoss`.
        name: Name of the loss. Defaults to `"sim_siam_loss"`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor, or a `[batch]` one with `reduction="none"`.

    Raises:
        ValueError: For an unknown `projection_type` or a non-finite
            `margin`; on views that are not `[batch, features]` tensors of one
            shape, or when `sample_weight` is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import SimSiamLoss
    >>> z = np.array([[1.0, 0.0], [1.0, 0.0]])
    >>> p = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> float(SimSiamLoss()(z, p))
    -0.5
    """

    per_sample_terms = True

    def __init__(
        self,
        projection_type: str = "negative_cosine_sim",
        margin: float = 0.0,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = "sim_siam_loss",
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        self.projection_type = check_choice(
            "projection_type", projection_type, PROJECTION_TYPES, owner=owner
        )
        self.margin = check_number("margin", margin, owner=owner)
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, projector: tf.Tensor, predictor: tf.Tensor) -> tf.Tensor:
        dtype = computation_dtype(predictor.dtype)
        target = l2_normalize(tf.stop_gradient(tf.cast(projector, dtype)), axis=1)
        prediction = l2_normalize(tf.cast(predictor, dtype), axis=1)
        cosines = tf.reduce_sum(target * prediction, axis=1)
        return _PROJECTIONS[self.projection_type](cosines) + self.margin

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(projection_type=self.projection_type, margin=self.margin)
        return config


def negative_cosine_sim(sim: tf.Tensor) -> tf.Tensor:
    """Returns `-sim`: the per-sample term of `projection_type="negative_cosine_sim"`."""
    return -sim


def cosine_distance(sim: tf.Tensor) -> tf.Tensor:
    """Returns `1 - sim`: the per-sample term of `projection_type="cosine_distance"`."""
    return 1.0 - sim


def angular_distance(sim: tf.Tensor) -> tf.Tensor:
    """Returns `arccos(sim) / pi`, the term of `projection_type="angular_distance"`.

    Cosines are clipped to `[-1, 1]` first: 0.17 gave NaN for a cosine that
    rounding put just above 1.
    """
    return tf.acos(tf.clip_by_value(sim, -1.0, 1.0)) / math.pi


_PROJECTIONS = {
    "negative_cosine_sim": negative_cosine_sim,
    "cosine_distance": cosine_distance,
    "angular_distance": angular_distance,
}
