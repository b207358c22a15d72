"""MoCo v2's InfoNCE of queries against their own keys and a queue of earlier keys."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class MoCoV2Loss(GlobalBatchLoss):
    """InfoNCE of each query against its own key and a queue of negatives (MoCo v1/v2).

    From He et al., "Momentum Contrast for Unsupervised Visual Representation
    Learning", CVPR 2020 (https://arxiv.org/abs/1911.05722), and Chen et al.,
    "Improved Baselines with Momentum Contrastive Learning", 2020
    (https://arxiv.org/abs/2003.04297). Called as
    `loss(y_true=tf.concat([keys, queue], 0), y_pred=queries)`: the first `n`
    rows of `y_true` are the momentum encoder's keys of the `n` queries'
    samples (row `i` the positive of query `i`), the remaining `Q` rows the
    queue of earlier keys, the negatives. With `q_i`, `k_i` and the queue's
    `u_j` L2-normalised and `tau` the temperature:

        L = (1 / N) * sum_i -log( exp(<q_i, k_i> / tau)
                                  / (exp(<q_i, k_i> / tau) + sum_j exp(<q_i, u_j> / tau)) )

    over the `N` samples of the global batch. No gradient reaches `y_true`.

    Across replicas each replica passes its own queries and keys and the
    same queue: a query's terms need no other replica's rows, and the
    reduction takes the mean over the global batch (see `GlobalBatchLoss`).

    Args:
        temperature: Softmax temperature `tau > 0`. Defaults to `0.2`, MoCo v2's.
        reduction: Defaults to `"sum_over_batch_size"`; `"none"` or `None`
            returns the `[batch]` per-sample terms. See `GlobalBatchLoss`.
        name: Name of the loss. Defaults to `"mocov2_loss"`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor, or a `[batch]` one with `reduction="none"`.

    Raises:
        ValueError: If `temperature` is not a positive number; for an unknown
            reduction; unless `y_true` is `[n + Q, d]` and `y_pred` `[n, d]`
            with `Q >= 1`; or when `sample_weight` is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import MoCoV2Loss
    >>> keys = np.array([[1.0, 0.0]])
    >>> queue = np.array([[0.0, 1.0]])
    >>> loss = MoCoV2Loss(temperature=0.5)(np.concatenate([keys, queue]), keys)
    >>> round(float(loss), 4)  # log(e^2 + e^0) - 2
    0.1269
    """

    per_sample_terms = True

    def __init__(
        self,
        temperature: float = 0.2,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = "mocov2_loss",
        dtype: Any = None,
    ) -> None:
        self.temperature = check_number(
            "temperature", temperature, positive=True, owner=type(self).__name__
        )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, keys_and_queue: tf.Tensor, queries: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's queries."""
        dtype = computation_dtype(queries.dtype)
        q = l2_normalize(tf.cast(queries, dtype), axis=1)
        rows = tf.shape(q)[0]
        others = l2_normalize(tf.stop_gradient(tf.cast(keys_and_queue, dtype)), axis=1)
        keys, queue = others[:rows], others[rows:]
        positive = tf.reduce_sum(q * keys, axis=1, keepdims=True)
        logits = tf.concat([positive, tf.matmul(q, queue, transpose_b=True)], axis=1)
        logits = logits / tf.constant(self.temperature, dtype)
        labels = tf.zeros([rows], tf.int32)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

    def check_inputs(self, y_true: Any, y_pred: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Checks that `y_true` is `[n + Q, d]` (`Q >= 1`) for `y_pred`'s `[n, d]`.

        Raises:
            ValueError: Naming the shapes received and the call expected.
        """
        keys = keras.ops.convert_to_tensor(y_true, dtype=self.dtype)
        queries = keras.ops.convert_to_tensor(y_pred, dtype=self.dtype)
        usage = (
            f"{type(self).__name__} is called as loss(tf.concat([keys, queue], 0), queries): "
            "keys [n, d] (row i the positive of query i), queue [Q, d] with Q >= 1, "
            f"queries [n, d]. Received shapes {keys.shape} and {queries.shape}."
        )
        if len(keys.shape) != 2 or len(queries.shape) != 2:
            raise ValueError(usage)
        if None not in (keys.shape[1], queries.shape[1]) and keys.shape[1] != queries.shape[1]:
            raise ValueError(usage)
        if None not in (keys.shape[0], queries.shape[0]) and keys.shape[0] <= queries.shape[0]:
            raise ValueError(usage)
        if keys.shape.is_fully_defined() and queries.shape.is_fully_defined():
            return keys, queries
        check = tf.debugging.assert_greater(tf.shape(keys)[0], tf.shape(queries)[0], message=usage)
        with tf.control_dependencies([check] if check is not None else []):
            return tf.identity(keys), tf.identity(queries)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["temperature"] = self.temperature
        return config
