"""ProxyNCA++: a softmax over the distances of each sample to the trained class proxies."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.proxy_loss import ProxyLoss


@keras.saving.register_keras_serializable(package="Similarity")
class ProxyNCALoss(ProxyLoss):
    """ProxyNCA++ loss: each sample's softmax over its distances to one proxy per class.

    From Teh, DeVries & Taylor, "ProxyNCA++: Revisiting and Revitalizing
    Proxy Neighborhood Component Analysis", ECCV 2020
    (https://arxiv.org/abs/2004.01113), which revisits Movshovitz-Attias et
    al., "No Fuss Distance Metric Learning using Proxies", ICCV 2017. With
    `x^` the L2-normalised embedding of a sample of class `y`, `p^_c` the
    L2-normalised proxy of class `c`, `d` the squared Euclidean distance and
    `T` the temperature, a sample's term is

        l(x) = -log( e^{-d(x^, p^_y) / T} / sum_{c} e^{-d(x^, p^_c) / T} )

    and the loss is the mean of the terms over the global batch. As in
    ProxyNCA++ (its "proxy assignment probability") the denominator runs
    over every proxy, the sample's own included: the term is the softmax
    cross-entropy over proxies (the 2017 paper left the own proxy out).
    The default temperature is the paper's, `T = 1/9` (its code scales
    embeddings and proxies by 3 before taking squared distances), and the
    proxies are initialised as in its code, `N(0, (1/8)^2)`. ProxyNCA++'s
    other components (global max pooling, layer normalisation of the
    embedding, fast-moving proxies: a much larger learning rate for the
    proxies) are the model's and the optimizer's; the metric-learning guide
    shows how to give the proxies their own learning rate.

    Across replicas: each sample's term needs only its own embedding and the
    proxies, so nothing is gathered; the mean is that of the global batch
    (unequal replicas included, see `GlobalBatchLoss`), and the proxies'
    gradients, which the strategy sums over the replicas, are those of one
    device holding the global batch.

    Args:
        num_classes: Number of classes, at least 2: labels lie in
            `[0, num_classes)`.
        embedding_size: Size of the embeddings and the proxies.
        temperature: The temperature `T > 0`. Defaults to `1/9`.
        proxy_initializer: Keras initializer of the proxies. Defaults to
            `RandomNormal(stddev=0.125)`.
        name: Name of the loss. Defaults to `"ProxyNCALoss"`.
        reduction: See `GlobalBatchLoss`: `"none"` gives the `[n]` terms.
        dtype: See `ProxyLoss`.

    Returns (when called):
        A scalar, or per-sample values with `reduction="none"`.

    Raises:
        ValueError: On a temperature out of range, or bad inputs (see
            `ProxyLoss`).

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import ProxyNCALoss
    >>> # Proxies [1, 0] and [0, 1]; each sample lies on its class's proxy.
    >>> loss = ProxyNCALoss(num_classes=2, embedding_size=2, proxy_initializer="identity")
    >>> embeddings = np.array([[1.0, 0.0], [0.0, 2.0]])
    >>> float(loss(np.array([0, 1]), embeddings)) < 1e-6
    True
    """

    def __init__(
        self,
        num_classes: int,
        embedding_size: int,
        temperature: float = 1.0 / 9.0,
        proxy_initializer: Any = None,
        name: str = "ProxyNCALoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        self.temperature = check_number("temperature", temperature, positive=True, owner=owner)
        if proxy_initializer is None:
            proxy_initializer = keras.initializers.RandomNormal(stddev=0.125)
        super().__init__(
            num_classes,
            embedding_size,
            proxy_initializer=proxy_initializer,
            name=name,
            reduction=reduction,
            dtype=dtype,
        )

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's samples."""
        labels, embeddings = y_true, y_pred
        x = l2_normalize(embeddings)
        p = l2_normalize(self.proxies_like(embeddings))
        squared = (
            tf.reduce_sum(tf.square(x), axis=1, keepdims=True)
            + tf.reduce_sum(tf.square(p), axis=1)[tf.newaxis, :]
            - 2.0 * tf.matmul(x, p, transpose_b=True)
        )
        logits = -tf.maximum(squared, 0.0) / self.temperature
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["temperature"] = self.temperature
        return config
