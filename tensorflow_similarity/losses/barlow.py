"""The Barlow Twins redundancy-reduction loss over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.collectives import gather_global_batch
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class Barlow(GlobalBatchLoss):
    """Barlow Twins loss: drive the views' cross-correlation to the identity.

    Also importable as `BarlowTwinsLoss`, the same class.

    From Zbontar, Jing, Misra, LeCun & Deny, "Barlow Twins: Self-Supervised
    Learning via Redundancy Reduction", ICML 2021
    (https://arxiv.org/abs/2103.03230). Called as `loss(z1, z2)` with the
    `[N, D]` embeddings of the two views. Each feature is standardised over
    the batch, `za_hat = (za - mean(za)) / sqrt(var(za) + epsilon)` (biased
    variance, as the paper's affine-free batch norm), and

        C_ij = (1 / N) * sum_b za_hat_bi * zb_hat_bj
        L = sum_i (1 - C_ii)^2 + lambda_ * sum_i sum_{j != i} C_ij^2 + margin

    Across replicas: the embeddings are all-gathered, so the means, variances
    and `C` run over the global batch (as the paper's synchronised batch norm
    and all-reduced `C` do); see `GlobalBatchLoss` for the contract. Gathering
    `2 N D` values costs less than all-reducing the `D x D` matrix when
    `2 N < D`, the usual regime.

    Args:
        lambda_: Weight `>= 0` of the off-diagonal (redundancy) term.
            Defaults to `5e-3`, the paper's value.
        margin: Constant added to the loss. Defaults to `0.0`
            (tensorflow-similarity 0.17: `1e-12`; a constant changes no
            gradient).
        reduction: Defaults to `"sum_over_batch_size"`; see `GlobalBatchLoss`.
            Not `"none"`: every term is a statistic of the whole batch.
        name: Name of the loss. Defaults to `"barlow"`.
        epsilon: Constant `>= 0` added to the variance when standardising.
            Defaults to `1e-5` (PyTorch's batch norm default, used by the
            paper's code). Keyword-only.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor.

    Raises:
        ValueError: If `lambda_` or `epsilon` is negative, `margin` is not
            finite or `reduction` is `"none"`; on views that are
            not `[batch, features]` tensors of one shape, on a global batch
            of fewer than 2 samples (checked at run time under a strategy),
            or when `sample_weight` is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import Barlow
    >>> z = np.array([[1.0, 2.0], [-1.0, 0.0], [0.0, -2.0]])
    >>> loss = Barlow(epsilon=0.0)(z, z)  # C_ii = 1, C_01 = C_10 = 0.5
    >>> round(float(loss), 4)  # 5e-3 * 2 * 0.5^2
    0.0025
    """

    min_batch_size = 2
    per_sample_terms = False

    def __init__(
        self,
        lambda_: float = 5e-3,
        margin: float = 0.0,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = "barlow",
        *,
        epsilon: float = 1e-5,
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        self.lambda_ = check_number("lambda_", lambda_, low=0, owner=owner)
        self.margin = check_number("margin", margin, owner=owner)
        self.epsilon = check_number("epsilon", epsilon, low=0, owner=owner)
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, za: tf.Tensor, zb: tf.Tensor) -> tf.Tensor:
        dtype = computation_dtype(za.dtype)
        za, zb = gather_global_batch(tf.cast(za, dtype), tf.cast(zb, dtype))
        n = tf.shape(za)[0]
        self.check_global_batch(n)

        c = tf.matmul(self.standardize_columns(za), self.standardize_columns(zb), transpose_a=True)
        c = c / tf.cast(n, dtype)
        on_diagonal = tf.reduce_sum(tf.square(1.0 - tf.linalg.diag_part(c)))
        if type(self).off_diagonal is Barlow.off_diagonal:
            # The same sum as over `off_diagonal(c)`, without its dynamic-shape boolean mask.
            zeros = tf.zeros(tf.shape(c)[:1], dtype)
            off_diagonal = tf.reduce_sum(tf.square(tf.linalg.set_diag(c, zeros)))
        else:
            off_diagonal = tf.reduce_sum(tf.square(self.off_diagonal(c)))
        return on_diagonal + self.lambda_ * off_diagonal + self.margin

    def off_diagonal(self, x: tf.Tensor) -> tf.Tensor:
        """Returns the off-diagonal entries of the square matrix `x`, row by row, flat."""
        return off_diagonal(x)

    def standardize_columns(self, x: tf.Tensor) -> tf.Tensor:
        """Returns `x` with each column centred and divided by `sqrt(variance + epsilon)`.

        0.17 divided by the standard deviation without `epsilon` (and gave 0
        for a constant column); `epsilon=0.0` reproduces it for the others.
        """
        mean, variance = tf.nn.moments(x, axes=[0])
        return (x - mean) * tf.math.rsqrt(variance + self.epsilon)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(lambda_=self.lambda_, margin=self.margin, epsilon=self.epsilon)
        return config


# The name the papers and the other libraries use; the same class as 0.17's `Barlow`.
BarlowTwinsLoss = Barlow


def off_diagonal(x: tf.Tensor) -> tf.Tensor:
    """Returns the off-diagonal entries of the square matrix `x`, row by row, as a vector."""
    x = tf.convert_to_tensor(x)
    keep = tf.logical_not(tf.eye(tf.shape(x)[0], dtype=tf.bool))
    return tf.boolean_mask(x, keep)
