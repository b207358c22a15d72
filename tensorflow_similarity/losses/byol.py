"""BYOL's normalised mean squared error between prediction and target, over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class BYOLLoss(GlobalBatchLoss):
    """Mean squared error of L2-normalised prediction and target (BYOL).

    From Grill et al., "Bootstrap Your Own Latent: A New Approach to
    Self-Supervised Learning", NeurIPS 2020 (https://arxiv.org/abs/2006.07733).
    Called as Keras losses are, `loss(y_true, y_pred)`: the target first, the
    target (momentum) network's projection `z'` of one view (its gradient is
    stopped here), the prediction second, the online network's prediction
    `q` of the other view:

        L = (1 / N) * sum_i || q_i / ||q_i|| - sg(z'_i) / ||sg(z'_i)|| ||^2
          = (1 / N) * sum_i  2 - 2 * <q_i, sg(z'_i)> / (||q_i|| * ||sg(z'_i)||)

    where `sg` is the stop-gradient and `N` the global batch size. The value
    lies in `[0, 4]`; no gradient reaches `z'`. The model symmetrises by
    adding the two directions, the paper's `L + L~`:
    `loss(z'2, q1) + loss(z'1, q2)`.

    Across replicas: each replica computes its own samples' terms (nothing
    is gathered) and the reduction takes the mean over the global batch; an
    empty global batch gives 0. See `GlobalBatchLoss` for the contract.

    Args:
        reduction: Defaults to `"sum_over_batch_size"`; `"none"` or `None`
            returns the `[batch]` per-sample terms. See `GlobalBatchLoss`.
        name: Name of the loss. Defaults to `"byol_loss"`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor, or a `[batch]` one with `reduction="none"`.

    Raises:
        ValueError: For an unknown reduction; on views that are not
            `[batch, features]` tensors of one shape, or when `sample_weight`
            is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import BYOLLoss
    >>> target = np.array([[1.0, 0.0], [1.0, 0.0]])
    >>> prediction = np.array([[2.0, 0.0], [0.0, 1.0]])
    >>> float(BYOLLoss()(target, prediction))  # (0 + 2) / 2
    1.0
    """

    per_sample_terms = True

    def __init__(
        self,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = "byol_loss",
        dtype: Any = None,
    ) -> None:
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, target: tf.Tensor, prediction: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms `2 - 2 * cos(q_i, z'_i)` of this replica's samples."""
        dtype = computation_dtype(prediction.dtype)
        z = l2_normalize(tf.stop_gradient(tf.cast(target, dtype)), axis=1)
        q = l2_normalize(tf.cast(prediction, dtype), axis=1)
        return 2.0 - 2.0 * tf.reduce_sum(q * z, axis=1)
