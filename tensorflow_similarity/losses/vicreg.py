"""The VICReg variance-invariance-covariance loss over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.collectives import gather_global_batch
from tensorflow_similarity.losses.barlow import off_diagonal
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class VicReg(GlobalBatchLoss):
    """VICReg: invariance, variance and covariance regularisation.

    Also importable as `VICRegLoss`, the same class.

    From Bardes, Ponce & LeCun, "VICReg: Variance-Invariance-Covariance
    Regularization for Self-Supervised Learning", ICLR 2022
    (https://arxiv.org/abs/2105.04906). Called as `loss(z1, z2)` with the
    `[N, D]` embeddings of the two views:

        s(Z, Z') = (1 / (N D)) * sum_b ||z_b - z'_b||^2        (invariance, MSE)
        v(Z)     = (1 / D) * sum_j max(0, gamma - sqrt(Var(z^j) + std_const))
        c(Z)     = (1 / D) * sum_{i != j} Cov(Z)_ij^2
        L = lambda_ * s(Z, Z') + mu * (v(Z) + v(Z')) / 2 + nu * (c(Z) + c(Z'))

    with the unbiased variance and covariance over the batch
    (`Cov(Z) = (1 / (N - 1)) * sum_b (z_b - mean)(z_b - mean)^T`). The
    factors `1 / D` and `/ 2` are those of the paper's reference code, for
    which the default coefficients were tuned. tensorflow-similarity 0.17
    used the biased variance inside the hinge and returned one value per
    sample (the invariance term per sample plus the batch terms).

    Across replicas: the embeddings are all-gathered, so all three terms, the
    variance hinge and the covariance included, run over the global batch;
    see `GlobalBatchLoss` for the contract.

    Args:
        std_const: Constant `>= 0` added to the variance under the square
            root. Defaults to `1e-4`.
        lambda_: Weight `>= 0` of the invariance term. Defaults to `25.0`.
        mu: Weight `>= 0` of the variance term. Defaults to `25.0`.
        nu: Weight `>= 0` of the covariance term. Defaults to `1.0`.
        reduction: Defaults to `"sum_over_batch_size"`; see `GlobalBatchLoss`.
            Not `"none"`: the variance and covariance terms are statistics of
            the whole batch.
        name: Name of the loss. Defaults to `"vic_reg"`.
        gamma: Target standard deviation `> 0` of each feature. Defaults to
            `1.0`. Keyword-only.
        epsilon: Another name for `std_const`, keyword-only; give one of
            them.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor.

    Raises:
        ValueError: If a coefficient is negative, `gamma` is not positive,
            `std_const` and `epsilon` are both given or `reduction` is
            `"none"`;
            on views that are not `[batch, features]` tensors of one shape, on
            a global batch of fewer than 2 samples (checked at run time under
            a strategy), or when `sample_weight` is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import VicReg
    >>> z = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    >>> float(VicReg(std_const=0.0)(z, z))  # Var = 8/3 > 1 and Cov = 0 for both features
    0.0
    """

    min_batch_size = 2
    per_sample_terms = False

    def __init__(
        self,
        std_const: float | None = None,
        lambda_: float = 25.0,
        mu: float = 25.0,
        nu: float = 1.0,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = "vic_reg",
        *,
        gamma: float = 1.0,
        epsilon: float | None = None,
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        if std_const is not None and epsilon is not None:
            raise ValueError(
                f"{owner}: std_const and epsilon name the same constant; give one of them. "
                f"Received: std_const={std_const!r}, epsilon={epsilon!r}"
            )
        given = "epsilon" if epsilon is not None else "std_const"
        std_const = next((v for v in (std_const, epsilon) if v is not None), 1e-4)
        self.lambda_ = check_number("lambda_", lambda_, low=0, owner=owner)
        self.mu = check_number("mu", mu, low=0, owner=owner)
        self.nu = check_number("nu", nu, low=0, owner=owner)
        self.gamma = check_number("gamma", gamma, positive=True, owner=owner)
        self.std_const = check_number(given, std_const, low=0, owner=owner)
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, za: tf.Tensor, zb: tf.Tensor) -> tf.Tensor:
        dtype = computation_dtype(za.dtype)
        za, zb = gather_global_batch(tf.cast(za, dtype), tf.cast(zb, dtype))
        n = tf.shape(za)[0]
        self.check_global_batch(n)

        invariance = tf.reduce_mean(tf.square(za - zb))
        za, zb = self.mean_center_columns(za), self.mean_center_columns(zb)
        variance = (self._variance(za) + self._variance(zb)) / 2.0
        covariance = self.cov_loss_each(za, n) + self.cov_loss_each(zb, n)
        return self.lambda_ * invariance + self.mu * variance + self.nu * covariance

    def _variance(self, centred: tf.Tensor) -> tf.Tensor:
        unbiased = tf.reduce_sum(tf.square(centred), axis=0) / _bessel(centred)
        std = tf.sqrt(unbiased + self.std_const)
        return tf.reduce_mean(tf.nn.relu(self.gamma - std))

    def off_diagonal(self, x: tf.Tensor) -> tf.Tensor:
        """Returns the off-diagonal entries of the square matrix `x`, row by row, flat."""
        return off_diagonal(x)

    def cov_loss_each(self, z: tf.Tensor, batch_size: Any) -> tf.Tensor:
        """Returns the covariance term of one view: `sum_{i != j} C_ij^2 / d`.

        Args:
            z: `[batch, d]` mean-centred embeddings (`mean_center_columns`).
            batch_size: Their number of rows; `C = z^T z / (batch_size - 1)`.
        """
        c = tf.matmul(z, z, transpose_a=True) / tf.cast(batch_size - 1, z.dtype)
        return tf.reduce_sum(tf.square(self.off_diagonal(c))) / tf.cast(tf.shape(z)[1], z.dtype)

    def mean_center_columns(self, x: tf.Tensor) -> tf.Tensor:
        """Returns `x` minus the mean of each of its columns."""
        return x - tf.reduce_mean(x, axis=0)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            std_const=self.std_const,
            lambda_=self.lambda_,
            mu=self.mu,
            nu=self.nu,
            gamma=self.gamma,
        )
        return config


def _bessel(z: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.shape(z)[0] - 1, z.dtype)


# The name the papers and the other libraries use; the same class as 0.17's `VicReg`.
VICRegLoss = VicReg
