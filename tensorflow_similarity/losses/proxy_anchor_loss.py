"""Proxy Anchor: each class's proxy as an anchor against the samples of the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.collectives import gather_rows, global_sum, sync_replica_context
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.proxy_loss import ProxyLoss


@keras.saving.register_keras_serializable(package="Similarity")
class ProxyAnchorLoss(ProxyLoss):
    """Proxy Anchor loss: each class's trained proxy pulls its samples and pushes the others.

    From Kim, Kim, Cho & Kwak, "Proxy Anchor Loss for Deep Metric Learning",
    CVPR 2020 (https://arxiv.org/abs/2003.13911). With `P` the proxies (one
    per class), `P+` those whose class has a sample in the global batch `X`,
    `X_p+` and `X_p-` the samples of `p`'s class and of the other classes,
    and `s(x, p)` the cosine similarity:

        L = 1/|P+| sum_{p in P+} log(1 + sum_{x in X_p+} e^{-alpha (s(x, p) - delta)})
          + 1/|P|  sum_{p in P}  log(1 + sum_{x in X_p-} e^{alpha (s(x, p) + delta)})

    The defaults are the paper's: margin `delta = 0.1`, `alpha = 32`, and
    the proxies initialised as its code does (He normal). The paper also
    trains the proxies with a learning rate 100 times the network's; that is
    the optimizer's choice, not the loss's, and the metric-learning guide
    shows how to do it in Keras.

    Each sum is taken in log space, shifted by the largest exponent of its
    proxy over the global batch, so no exponential overflows whatever
    `alpha`. A global batch with no sample gives 0.

    Across replicas: the loss is a function of the whole global batch (the
    sums above run over every replica's samples), a loss of batch statistics
    in `GlobalBatchLoss`'s terms (`reduction="none"` is refused). Each
    replica computes the similarities of its own samples to the proxies only;
    one all-reduce gathers the replicas' largest exponents of each proxy (the
    common shift) and one sums their shifted exponentials of each proxy, so
    `|P+|` and every sum are those of the global batch. Each replica returns
    `L / K`; the gradients of the embeddings and of the proxies that the
    strategy sums are those of one device holding the global batch.

    Args:
        num_classes: Number of classes, at least 2: labels lie in
            `[0, num_classes)`.
        embedding_size: Size of the embeddings and the proxies.
        margin: The margin `delta`, in `[0, 1]`. Defaults to `0.1`.
        alpha: The scale `alpha > 0`. Defaults to `32.0`.
        proxy_initializer: Keras initializer of the proxies. Defaults to
            `"he_normal"`.
        name: Name of the loss. Defaults to `"ProxyAnchorLoss"`.
        reduction: `"sum_over_batch_size"` (default): `L`, divided by `K` on
            each of `K > 1` replicas; `"sum"`: `n_k * L`, this replica's
            samples' share of `N * L`. See `GlobalBatchLoss`.
        dtype: See `ProxyLoss`.

    Returns (when called):
        A scalar.

    Raises:
        ValueError: On an argument out of range, `reduction="none"`, or bad
            inputs (see `ProxyLoss`).

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tensorflow_similarity.layers import MetricEmbedding
    >>> from tensorflow_similarity.losses import ProxyAnchorLoss
    >>> from tensorflow_similarity.models import SimilarityModel
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.random((32, 8)).astype("float32"), np.arange(32) % 4
    >>> inputs = keras.Input((8,))
    >>> model = SimilarityModel(inputs, MetricEmbedding(16)(inputs))
    >>> loss = ProxyAnchorLoss(num_classes=4, embedding_size=16)
    >>> model.compile("adam", loss=loss)
    >>> model.fit(x, y, batch_size=16, epochs=1, verbose=0).history["loss"][0] > 0
    True
    >>> any(w is loss.proxies for w in model.trainable_weights)
    True
    """

    per_sample_terms = False

    def __init__(
        self,
        num_classes: int,
        embedding_size: int,
        margin: float = 0.1,
        alpha: float = 32.0,
        proxy_initializer: Any = "he_normal",
        name: str = "ProxyAnchorLoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        self.margin = check_number("margin", margin, low=0.0, high=1.0, owner=owner)
        self.alpha = check_number("alpha", alpha, positive=True, owner=owner)
        super().__init__(
            num_classes,
            embedding_size,
            proxy_initializer=proxy_initializer,
            name=name,
            reduction=reduction,
            dtype=dtype,
        )

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        """Returns the loss `L` of the global batch (the same on every replica)."""
        labels, embeddings = y_true, y_pred
        proxies = self.proxies_like(embeddings)
        similarities = tf.matmul(l2_normalize(embeddings), l2_normalize(proxies), transpose_b=True)
        positive = tf.one_hot(labels, self.num_classes, on_value=True, off_value=False)
        exponents = tf.stack(
            [
                -self.alpha * (similarities - self.margin),
                self.alpha * (similarities + self.margin),
            ]
        )
        members = tf.stack([positive, tf.logical_not(positive)])
        terms, present = _log1p_sum_exp_over_batch(exponents, members)
        with_positives = tf.reduce_sum(tf.cast(present[0], terms.dtype))
        pulled = tf.math.divide_no_nan(tf.reduce_sum(terms[0]), with_positives)
        pushed = tf.reduce_sum(terms[1]) / self.num_classes
        # The shifted log-sum-exp can step around a non-finite similarity; a non-finite
        # embedding must still give a NaN loss, as every metric loss's does.
        poison = 0.0 * tf.reduce_sum(similarities)
        return pulled + pushed + poison

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(margin=self.margin, alpha=self.alpha)
        return config


def _log1p_sum_exp_over_batch(
    exponents: tf.Tensor, members: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns `log(1 + sum e^exponents)` over each column's members of the global batch.

    Args:
        exponents: `[..., n, C]`, this replica's rows.
        members: `[..., n, C]` booleans, the rows each column sums.

    Returns:
        `(values, present)`, both `[..., C]`: the values (0 for a column
        with no member in the global batch) and whether the column has one.
    """
    lowest = exponents.dtype.min
    masked = tf.where(members, exponents, lowest)
    # Finite even for an empty replica (the max of nothing is -inf): gather_rows needs it.
    shift = tf.maximum(tf.reduce_max(masked, axis=-2), lowest)
    ctx = sync_replica_context()
    if ctx is not None:
        rows = gather_rows(ctx, tf.reshape(shift, [-1]))
        shift = tf.reshape(tf.reduce_max(rows, axis=0), tf.shape(shift))
    # A constant shift: log-sum-exp's value and gradient do not depend on it.
    shift = tf.stop_gradient(shift)
    # A non-member's masked exponent minus the shift is finite, so the product
    # with 0 (and its gradient) is 0, never inf * 0.
    shifted = tf.exp(masked - shift[..., tf.newaxis, :]) * tf.cast(members, exponents.dtype)
    sums = global_sum(tf.reduce_sum(shifted, axis=-2))
    # A column with a member sums at least e^0 = 1 (its largest member).
    present = sums > 0.0
    logs = tf.math.log(tf.where(present, sums, tf.ones_like(sums)))
    return tf.where(present, tf.nn.softplus(shift + logs), tf.zeros_like(sums)), present
