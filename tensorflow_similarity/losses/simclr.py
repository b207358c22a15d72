"""SimCLR's NT-Xent loss, with the negatives of the whole global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.collectives import gather_global_batch, gather_keys
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


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
    This is half of tensorflow-similarity 0.17's value at the same
    temperature (0.17 summed the two views' anchors of each sample and took
    the mean over the `N` samples).

    A sample's term is the mean of its two anchors' terms, so `L` is the mean
    of the samples' terms. Across replicas each replica computes the terms of
    its own samples against the views gathered from every replica, so every
    anchor's negatives are those of the whole global batch; see
    `GlobalBatchLoss` for the contract and the reductions.

    Args:
        temperature: Softmax temperature `> 0`. Defaults to `0.1`.
        name: Name of the loss. Defaults to `"sim_clr_loss"`.
        reduction: Defaults to `"sum_over_batch_size"`; `"none"` or `None`
            returns the `[batch]` per-sample terms. See `GlobalBatchLoss`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor, or a `[batch]` one with `reduction="none"`.

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
    per_sample_terms = True

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

    def call(self, za: tf.Tensor, zb: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's samples, the mean of their two anchors'."""
        dtype = computation_dtype(za.dtype)
        z1, z2 = tf.cast(za, dtype), tf.cast(zb, dtype)
        keys1, keys2 = gather_keys(z1, z2)
        self.check_global_batch(tf.shape(keys1)[0])
        u1, u2 = l2_normalize(z1, axis=1), l2_normalize(z2, axis=1)
        k1, k2 = l2_normalize(keys1, axis=1), l2_normalize(keys2, axis=1)
        return 0.5 * (self._anchor_terms(u1, k1, k2) + self._anchor_terms(u2, k2, k1))

    def _anchor_terms(self, anchors: tf.Tensor, same_view: tf.Tensor, other_view: tf.Tensor):
        """Returns the `[n]` cross-entropy terms of `anchors`, the first `n` rows of `same_view`.

        Anchor `i`'s positive is row `i` of `other_view`; its negatives are
        the other rows of both views.
        """
        n = tf.shape(anchors)[0]
        across = tf.matmul(anchors, other_view, transpose_b=True) / self.temperature
        within = tf.matmul(anchors, same_view, transpose_b=True) / self.temperature
        # -inf removes an anchor's similarity with itself from its softmax exactly.
        itself = tf.equal(tf.range(n)[:, tf.newaxis], tf.range(tf.shape(same_view)[0]))
        within = tf.where(itself, tf.constant(-float("inf"), within.dtype), within)
        logits = tf.concat([across, within], axis=1)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.range(n), logits=logits)

    def contrast(self, hidden1: tf.Tensor, hidden2: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` cross-entropy terms of the anchors `hidden1`.

        Anchor `i`'s softmax runs over `hidden2` (its positive is row `i`)
        and the other rows of `hidden1`, on similarities `<a, b> / T`; the
        rows are used as given (`call` L2-normalises them first). 0.17's
        `contrast` also gathered the other replicas' rows; `call` does that
        here, before.

        Args:
            hidden1: `[n, d]` anchors.
            hidden2: `[n, d]` their positives, row for row.
        """
        return self._anchor_terms(hidden1, hidden1, hidden2)

    @staticmethod
    def cross_replica_concat(tensor: tf.Tensor, strategy: Any = None) -> tf.Tensor:
        """Returns `tensor` of every replica, concatenated in replica order (0.17's helper).

        The rows of all replicas in a replica context with several of them
        (differentiably: gradients flow back to each replica's rows), else
        `tensor` itself. `strategy` is accepted for 0.17's signature; the
        replica context's own strategy is used.
        """
        (gathered,) = gather_global_batch(tf.convert_to_tensor(tensor))
        return gathered

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["temperature"] = self.temperature
        return config
