"""SimCLR's NT-Xent loss, with the negatives of the whole global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.collectives import gather_global_batch
from tensorflow_similarity.losses._global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class SimCLRLoss(GlobalBatchLoss):
    """Normalised temperature-scaled cross entropy, NT-Xent (SimCLR).

    From Chen, Kornblith, Norouzi & Hinton, "A Simple Framework for
    Contrastive Learning of Visual Representations", ICML 2020
    (https://arxiv.org/abs/2002.05709). Called as `loss(z1, z2)` with the
    projections of the two views, row `i` of each coming from sample `i`.
    With the `2N` L2-normalised rows `u_1..u_2N` (`z1` then `z2`), `pos(k)` the
    other view of the same sample and `s_kj = <u_k, u_j> / temperature`:

        L = (1 / 2N) * sum_k -log( exp(s_k,pos(k)) / sum_{j != k} exp(s_kj) )

    Every anchor's negatives are the `2N - 2` other samples of both views.

    Across replicas: the views are all-gathered (replicas may hold different
    batch sizes), so every anchor's negatives are those of the whole global
    batch; see `GlobalBatchLoss` for the contract.

    Args:
        temperature: Softmax temperature `> 0`. Defaults to `0.1`.
        name: Name of the loss. Defaults to `"sim_clr_loss"`.
        reduction: Defaults to `"sum_over_batch_size"`; see `GlobalBatchLoss`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor.

    Raises:
        ValueError: If `temperature` is not a positive number; on views that
            are not `[batch, features]` tensors of one shape, on a global batch
            of fewer than 2 samples (checked at run time under a strategy),
            or when `sample_weight` is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import SimCLRLoss
    >>> z1 = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> loss = SimCLRLoss(temperature=0.5)(z1, z1)
    >>> round(float(loss), 4)  # log(e^2 + 2 e^0) - 2
    0.2395
    """

    min_batch_size = 2

    def __init__(
        self,
        temperature: float = 0.1,
        name: str | None = "sim_clr_loss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        self.temperature = check_number(
            "temperature", temperature, positive=True, owner=type(self).__name__
        )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        dtype = computation_dtype(y_true.dtype)
        z1, z2 = gather_global_batch(tf.cast(y_true, dtype), tf.cast(y_pred, dtype))
        n = tf.shape(z1)[0]
        self._check_global_batch(n)

        u = tf.math.l2_normalize(tf.concat([z1, z2], axis=0), axis=1)
        logits = tf.matmul(u, u, transpose_b=True) / self.temperature
        # -inf removes an anchor's similarity with itself from its softmax exactly.
        logits = tf.where(tf.eye(2 * n, dtype=tf.bool), tf.constant(-float("inf"), dtype), logits)
        positives = tf.concat([tf.range(n, 2 * n), tf.range(n)], axis=0)
        per_anchor = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=positives, logits=logits)
        return tf.reduce_mean(per_anchor)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["temperature"] = self.temperature
        return config
