"""SwAV's swapped prediction of Sinkhorn-Knopp codes over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_int, check_number
from tensorflow_similarity.collectives import gather_rows, sync_replica_context
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


def sinkhorn_knopp(scores: Any, epsilon: float = 0.05, iterations: int = 3) -> tf.Tensor:
    """Returns SwAV's codes: the equipartitioned assignment of the global batch to prototypes.

    From Caron et al., "Unsupervised Learning of Visual Features by
    Contrasting Cluster Assignments", NeurIPS 2020
    (https://arxiv.org/abs/2006.09882), as its `distributed_sinkhorn`. With
    `s[b, k]` the score of sample `b` against prototype `k` over the `B`
    samples of the global batch, the codes start from `exp(s / epsilon)` and
    alternately rescale each prototype's column to sum to `1 / K` over the
    global batch and each sample's row to sum to `1 / B`, `iterations`
    times; the result is multiplied by `B`, so each row is a probability
    distribution over the `K` prototypes and each prototype receives about
    `B / K` samples.

    The iterations run in the log domain: each rescaling subtracts a
    log-sum-exp, so the codes stay finite for any finite scores (no
    `exp(s / epsilon)` is ever formed; scores of 1e4 with `epsilon = 0.05`
    are fine). They are computed in float32 whatever the input's dtype
    (float16 and bfloat16 inputs are cast up; float64 stays float64). No
    gradient flows through the codes.

    Across replicas, each replica holds its own samples' rows and the
    column sums run over the global batch: each iteration's log-sum-exp
    over the samples is one all-reduce of every replica's per-prototype
    maximum and scaled sum (`collectives.gather_rows`), so a call issues
    exactly `iterations` collectives. Neither the global batch size nor the
    global maximum is needed: both are constants that each rescaling
    cancels. Replicas may hold different numbers of rows, none included;
    the result is that of one device holding the concatenated batch.

    Args:
        scores: `[batch, K]` scores of this replica's samples against the
            `K` prototypes, or `[batch, ..., K]` for several independent
            problems at once (e.g. `[batch, views, K]`: one per view).
        epsilon: Entropic regularisation `epsilon > 0`: the smaller, the
            sharper the codes. Defaults to `0.05`, the paper's.
        iterations: Number of Sinkhorn-Knopp iterations, at least 1.
            Defaults to `3`, the paper's.

    Returns:
        The codes, of the shape of `scores` and in float32 (float64 for a
        float64 input); each `[K]` row sums to 1.

    Raises:
        ValueError: If `scores` has rank below 2, `epsilon` is not a
            positive number or `iterations` not a positive integer.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import sinkhorn_knopp
    >>> scores = np.array([[0.9, 0.8], [0.7, 0.1], [0.6, 0.2]])  # all prefer prototype 0
    >>> codes = sinkhorn_knopp(scores, epsilon=0.5, iterations=50).numpy()
    >>> codes.sum(axis=1).round(4).tolist(), codes.sum(axis=0).round(2).tolist()
    ([1.0, 1.0, 1.0], [1.5, 1.5])
    """
    owner = "sinkhorn_knopp"
    epsilon = check_number("epsilon", epsilon, positive=True, owner=owner)
    iterations = check_int("iterations", iterations, minimum=1, owner=owner)
    scores = tf.convert_to_tensor(scores)
    if scores.shape.rank is not None and scores.shape.rank < 2:
        raise ValueError(
            f"{owner} expects scores of shape [batch, K] (or [batch, ..., K]) and received "
            f"shape {scores.shape}. Pass one row of prototype scores per sample."
        )
    dtype = computation_dtype(scores.dtype)
    log_codes = tf.stop_gradient(tf.cast(scores, dtype)) / tf.constant(epsilon, dtype)
    for _ in range(iterations):
        log_codes -= _global_logsumexp(log_codes)
        log_codes -= tf.reduce_logsumexp(log_codes, axis=-1, keepdims=True)
    return tf.exp(log_codes)


def _global_logsumexp(values: tf.Tensor) -> tf.Tensor:
    """Log-sum-exp over axis 0 of the global batch, with one all-reduce under a strategy."""
    # An empty batch's maximum is -inf, and gather_rows needs finite rows: the
    # dtype's lowest finite value weighs nothing against any real maximum.
    local_max = tf.maximum(tf.reduce_max(values, axis=0), values.dtype.min)
    local_sum = tf.reduce_sum(tf.exp(values - local_max), axis=0)
    ctx = sync_replica_context()
    if ctx is None:
        return local_max + tf.math.log(local_sum)
    shape = tf.shape(local_max)
    rows = gather_rows(
        ctx, tf.concat([tf.reshape(local_max, [-1]), tf.reshape(local_sum, [-1])], 0)
    )
    maxima, sums = tf.split(rows, 2, axis=1)
    top = tf.reduce_max(maxima, axis=0)
    total = tf.reduce_sum(sums * tf.exp(maxima - top), axis=0)
    return tf.reshape(top + tf.math.log(total), shape)


@keras.saving.register_keras_serializable(package="Similarity")
class SwAVLoss(GlobalBatchLoss):
    """Swapped prediction of each view's Sinkhorn-Knopp codes from the other views (SwAV).

    From Caron et al., "Unsupervised Learning of Visual Features by
    Contrasting Cluster Assignments", NeurIPS 2020
    (https://arxiv.org/abs/2006.09882). Called as
    `loss(y_true=code_scores, y_pred=scores)`: `scores` is `[batch, V, K]`,
    each of the `V` views' (crops') scores against the `K` prototypes (the
    dot products of the normalised embeddings and prototypes), and
    `code_scores` is `[batch, V_c, K]`, the scores of the `V_c <= V` views
    the codes are computed from, which are the first `V_c` views of
    `scores` (the global crops; usually `scores[:, :2]`). The codes
    `q_v = sinkhorn_knopp(code_scores[:, v], epsilon, sinkhorn_iterations)`
    carry no gradient. With `T` the temperature and the pairs of a code
    view `v` and a different view `w`:

        loss_i = 1 / (V_c * (V - 1)) * sum_{v < V_c} sum_{w < V, w != v}
                 -sum_k q_v[i, k] * log_softmax(scores[i, w] / T)_k

    and the loss is the mean of `loss_i` over the `N` samples of the global
    batch: the paper's loss (`main_swav.py`), averaged over the `V - 1`
    other views of each code view, then over the code views.

    A queue (SwAV's for small batches): `code_scores` may start with `Q`
    more rows than `scores` has, `[Q + batch, V_c, K]`, the scores of
    earlier samples' embeddings against the current prototypes, identical
    on every replica. They join Sinkhorn-Knopp's sums over samples once (on
    the first replica only, across replicas) and get no term; the codes of
    the batch's rows are then those over the queue and the global batch.

    Across replicas: the codes are those of the global batch (each
    Sinkhorn-Knopp iteration sums its columns over every replica: one
    all-reduce per iteration for all code views together), each replica
    computes its own samples' terms, and the reduction takes the mean over
    the global batch; an empty global batch gives 0. The codes and the loss
    are computed in float32 under any dtype policy (float64 for a float64
    loss). See `GlobalBatchLoss` for the contract.

    Args:
        temperature: Temperature `T > 0` of the predictions' softmax.
            Defaults to `0.1`, the paper's.
        epsilon: Entropic regularisation of the codes (`sinkhorn_knopp`).
            Defaults to `0.05`.
        sinkhorn_iterations: Sinkhorn-Knopp iterations, at least 1.
            Defaults to `3`.
        reduction: Defaults to `"sum_over_batch_size"`; `"none"` or `None`
            returns the `[batch]` per-sample terms. See `GlobalBatchLoss`.
        name: Name of the loss. Defaults to `"swav_loss"`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor, or a `[batch]` one with `reduction="none"`.

    Raises:
        ValueError: If `temperature` or `epsilon` is not a positive number
            or `sinkhorn_iterations` not a positive integer; for an unknown
            reduction; on inputs that are not `[Q + batch, V_c, K]` and
            `[batch, V, K]` tensors (`Q >= 0`) with the same `K`,
            `V_c >= 1` and `V >= max(V_c, 2)`, or when `sample_weight` is
            given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import SwAVLoss
    >>> scores = np.array([[[1.0, 0.0], [0.0, 1.0]],  # 2 samples, 2 views, K = 2
    ...                    [[0.0, 1.0], [1.0, 0.0]]])
    >>> loss = SwAVLoss(temperature=1.0, epsilon=1.0)
    >>> # Sample 0's view-0 codes [0.73, 0.27] against softmax([0, 1]) of its view 1, etc.
    >>> round(float(loss(scores[:, :2], scores)), 4)
    1.0443
    """

    per_sample_terms = True

    def __init__(
        self,
        temperature: float = 0.1,
        epsilon: float = 0.05,
        sinkhorn_iterations: int = 3,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = "swav_loss",
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        self.temperature = check_number("temperature", temperature, positive=True, owner=owner)
        self.epsilon = check_number("epsilon", epsilon, positive=True, owner=owner)
        self.sinkhorn_iterations = check_int(
            "sinkhorn_iterations", sinkhorn_iterations, minimum=1, owner=owner
        )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, code_scores: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's samples, each the mean over its pairs."""
        dtype = computation_dtype(scores.dtype)
        queued = tf.shape(code_scores)[0] - tf.shape(scores)[0]
        ctx = sync_replica_context()
        if ctx is not None:
            # The queue is every replica's: its rows count once in the sums over samples.
            first = tf.equal(ctx.replica_id_in_sync_group, 0)
            code_scores = code_scores[tf.where(first, 0, queued) :]
            queued = tf.where(first, queued, 0)
        codes = sinkhorn_knopp(code_scores, self.epsilon, self.sinkhorn_iterations)
        codes = tf.cast(codes[queued:], dtype)
        log_predictions = tf.nn.log_softmax(tf.cast(scores, dtype) / self.temperature)
        # cross[i, v, w]: code view v's cross entropy with the prediction of view w.
        cross = -tf.einsum("ivk,iwk->ivw", codes, log_predictions)
        code_views, views = tf.shape(codes)[1], tf.shape(log_predictions)[1]
        same_view = tf.equal(tf.range(code_views)[:, None], tf.range(views)[None, :])
        cross = tf.where(same_view[None], tf.zeros_like(cross), cross)
        pairs = tf.cast(code_views * (views - 1), dtype)
        return tf.reduce_sum(cross, axis=[1, 2]) / pairs

    def check_inputs(self, y_true: Any, y_pred: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Checks the static shapes of the code views' and all views' scores; returns tensors.

        Shapes a trace leaves unknown are checked at run time, before the
        loss is computed.

        Raises:
            ValueError: Unless `y_true` is `[Q + batch, V_c, K]` (`Q >= 0`)
                and `y_pred` `[batch, V, K]` with the same `K`, `V_c >= 1`
                and `V >= max(V_c, 2)`.
        """
        code_scores = keras.ops.convert_to_tensor(y_true, dtype=self.dtype)
        scores = keras.ops.convert_to_tensor(y_pred, dtype=self.dtype)
        name = type(self).__name__
        usage = (
            "Call it as loss(code_scores [batch, V_c, K], scores [batch, V, K]), the code "
            "views being the first V_c views of scores (usually scores[:, :2])."
        )
        received = f"Received shapes {code_scores.shape} (code_scores) and {scores.shape} (scores)."
        if len(code_scores.shape) != 3 or len(scores.shape) != 3:
            raise ValueError(
                f"{name} expects rank-3 inputs [batch, views, prototypes]. {received} {usage}"
            )
        (batch_c, views_c, k_c), (batch, views, k) = code_scores.shape, scores.shape
        if batch_c is not None and batch is not None and batch_c < batch:
            raise ValueError(
                f"{name}: code_scores must have as many rows as scores, or more (a queue's "
                f"rows first). {received} {usage}"
            )
        if k_c is not None and k is not None and k_c != k:
            raise ValueError(
                f"{name}: code_scores and scores must have the same number K of prototypes. "
                f"{received} {usage}"
            )
        if views_c is not None and views_c < 1:
            raise ValueError(f"{name} needs at least one code view. {received} {usage}")
        if views is not None and views < max(views_c or 1, 2):
            raise ValueError(
                f"{name} needs at least as many views as code views, and at least 2 (a code "
                f"view's codes are predicted from the other views). {received} {usage}"
            )
        if code_scores.shape.is_fully_defined() and scores.shape.is_fully_defined():
            return code_scores, scores
        shape_c, shape = tf.shape(code_scores), tf.shape(scores)
        checks = [
            tf.debugging.assert_equal(
                shape_c[2], shape[2], message=f"{name}: code_scores and scores must have one K."
            ),
            tf.debugging.assert_greater_equal(
                shape_c[0],
                shape[0],
                message=f"{name}: code_scores must have as many rows as scores, or more.",
            ),
            tf.debugging.assert_greater_equal(
                shape[1],
                tf.maximum(shape_c[1], 2),
                message=f"{name}: needs V >= max(V_c, 2) views.",
            ),
            tf.debugging.assert_greater_equal(
                shape_c[1], 1, message=f"{name}: needs at least one code view."
            ),
        ]
        with tf.control_dependencies([c for c in checks if c is not None]):
            return tf.identity(code_scores), tf.identity(scores)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            temperature=self.temperature,
            epsilon=self.epsilon,
            sinkhorn_iterations=self.sinkhorn_iterations,
        )
        return config
