"""MoCo v3's InfoNCE of queries against the momentum keys of the whole global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.collectives import gather_keys
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class MoCoV3Loss(GlobalBatchLoss):
    """InfoNCE of each query against the keys of the global batch (MoCo v3).

    From Chen, Xie & He, "An Empirical Study of Training Self-Supervised
    Vision Transformers", ICCV 2021 (https://arxiv.org/abs/2104.02057).
    Called as `loss(y_true=keys, y_pred=queries)`: the keys are the momentum
    encoder's outputs for one view (their gradient is stopped here), the
    queries the online encoder's predictions for the other view, row `i` of
    each coming from sample `i`. With `q_i` and `k_j` L2-normalised and
    `tau` the temperature:

        L = (1 / N) * sum_i  2 * tau * -log( exp(<q_i, k_i> / tau)
                                             / sum_j exp(<q_i, k_j> / tau) )

    over the `N` samples of the global batch: every query's positive is its
    own sample's key and its negatives the other `N - 1` keys. The factor
    `2 * tau` is the paper's, which makes the gradient's scale independent
    of `tau`. No gradient reaches the keys. The model symmetrises by adding
    the two directions, `loss(k2, q1) + loss(k1, q2)`.

    Across replicas each replica computes the terms of its own `n_k`
    queries against the `N` keys gathered from every replica (its own keys
    first, `tensorflow_similarity.collectives.gather_keys`), so every query's
    negatives are those of the whole global batch; see `GlobalBatchLoss` for
    the contract and the reductions.

    Args:
        temperature: Softmax temperature `tau > 0`. Defaults to `0.2`, the
            paper's for ViT.
        reduction: Defaults to `"sum_over_batch_size"`; `"none"` or `None`
            returns the `[batch]` per-sample terms. See `GlobalBatchLoss`.
        name: Name of the loss. Defaults to `"mocov3_loss"`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor, or a `[batch]` one with `reduction="none"`.

    Raises:
        ValueError: If `temperature` is not a positive number; for an
            unknown reduction; on views that are not `[batch, features]`
            tensors of one shape, on a global batch of fewer than 2 samples
            (checked at run time under a strategy), or when `sample_weight`
            is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import MoCoV3Loss
    >>> keys = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> loss = MoCoV3Loss(temperature=0.5)(keys, 3.0 * keys)
    >>> round(float(loss), 4)  # 2 * 0.5 * (log(e^2 + e^0) - 2)
    0.1269
    """

    min_batch_size = 2
    per_sample_terms = True

    def __init__(
        self,
        temperature: float = 0.2,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = "mocov3_loss",
        dtype: Any = None,
    ) -> None:
        self.temperature = check_number(
            "temperature", temperature, positive=True, owner=type(self).__name__
        )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, keys: tf.Tensor, queries: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's queries against the global batch's keys."""
        dtype = computation_dtype(queries.dtype)
        (all_keys,) = gather_keys(tf.stop_gradient(tf.cast(keys, dtype)))
        self.check_global_batch(tf.shape(all_keys)[0])
        q = l2_normalize(tf.cast(queries, dtype), axis=1)
        k = l2_normalize(all_keys, axis=1)
        logits = tf.matmul(q, k, transpose_b=True) / self.temperature
        # Own keys come first, so query i's positive is key i.
        labels = tf.range(tf.shape(q)[0])
        terms = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        return 2.0 * self.temperature * terms

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["temperature"] = self.temperature
        return config
