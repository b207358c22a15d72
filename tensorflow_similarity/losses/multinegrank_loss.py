"""Multiple negatives ranking loss, with the negatives of the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.collectives import gather_keys
from tensorflow_similarity.distances import Distance, InnerProductSimilarity, distance_canonicalizer
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class MultiNegativesRankLoss(GlobalBatchLoss):
    """Multiple negatives ranking loss: each query's key against every other key.

    From Henderson et al., "Efficient Natural Language Response Suggestion
    for Smart Reply" (https://arxiv.org/abs/1705.00652). Called as
    `loss(query_embeddings, key_embeddings)` with row `i` of each a positive
    pair (no labels); with `s_ij = scale * <q_i, k_j>`:

        L = (1 / n) sum_i ( -s_ii + log sum_j exp(s_ij) )

    the cross entropy of each query over all keys. 0.17 computed
    `log(1 + sum_j exp(s_ij))`, as if there were one more key at similarity
    0; that term is dropped here (a difference of at most `log(1 + e^-s_ii)`
    per query, negligible once `s_ii` is large).

    Across replicas: each replica ranks its own queries' keys against the
    keys gathered from the whole global batch. See `GlobalBatchLoss` for the
    contract and the reductions (`"none"` returns the per-query terms).

    Args:
        name: Name of the loss. Defaults to `"MultipleNegativesRankingLoss"`.
        distance: Must be the inner product (`"inner_product"`, the default)
            or an `InnerProductSimilarity`: the formula needs a similarity.
        scale: Similarity scale `> 0`. Defaults to `20.0`.
        reduction: See above.
        dtype: Dtype of the computation, at least float32.

    Returns (when called):
        A scalar tensor, or a `[batch]` one with `reduction="none"`.

    Raises:
        ValueError: On a distance other than the inner product, a scale that
            is not a positive number, or views of different shapes.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import MultiNegativesRankLoss
    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> round(float(MultiNegativesRankLoss(scale=1.0)(q, q)), 4)  # log(1 + e^-1)
    0.3133
    """

    def __init__(
        self,
        name: str = "MultipleNegativesRankingLoss",
        distance: Distance | str | dict = "inner_product",
        scale: float = 20.0,
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        if isinstance(distance, dict):
            distance = keras.saving.deserialize_keras_object(distance)
        self.distance = distance_canonicalizer(distance)
        if not isinstance(self.distance, InnerProductSimilarity):
            raise ValueError(
                f"MultiNegativesRankLoss needs the inner product similarity, received "
                f"distance={distance!r}. Use distance='inner_product' (L2-normalise the "
                "embeddings first for a cosine similarity)."
            )
        self.scale = check_number("scale", scale, positive=True, owner=type(self).__name__)
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, query_emb: tf.Tensor, key_emb: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's queries against the global batch's keys."""
        dtype = computation_dtype(query_emb.dtype)
        (keys,) = gather_keys(tf.cast(key_emb, dtype))
        return self.query_terms(tf.cast(query_emb, dtype), keys)

    def query_terms(self, queries: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms `-s_ii + log sum_j exp(s_ij)` of these queries and keys.

        Query `i`'s positive is key `i`; the keys may outnumber the queries.
        """
        logits = self.scale * self.distance(queries, keys)
        targets = tf.range(tf.shape(queries)[0])
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["distance"] = keras.saving.serialize_keras_object(self.distance)
        config["scale"] = self.scale
        return config


@keras.saving.register_keras_serializable(package="Similarity")
def multineg_ranking_loss(
    query_emb: Any, key_emb: Any, scale: float, distance: Distance | str
) -> tf.Tensor:
    """Returns the `[n]` per-query terms of `MultiNegativesRankLoss` (0.17's functional form).

    Without 0.17's extra key at similarity 0 (see `MultiNegativesRankLoss`);
    nothing is gathered across replicas.

    Args:
        query_emb: `[n, d]` query embeddings.
        key_emb: `[n, d]` key embeddings, row `i` the positive of query `i`.
        scale: Similarity scale `> 0`.
        distance: The inner product (`"inner_product"` or an
            `InnerProductSimilarity`).

    Raises:
        ValueError: For another distance or a bad scale.
    """
    loss = MultiNegativesRankLoss(distance=distance, scale=scale)
    queries = tf.convert_to_tensor(query_emb)
    dtype = computation_dtype(queries.dtype)
    return loss.query_terms(tf.cast(queries, dtype), tf.cast(tf.convert_to_tensor(key_emb), dtype))
