"""The VICReg variance-invariance-covariance loss over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.collectives import gather_global_batch
from tensorflow_similarity.losses._global_batch import GlobalBatchLoss, computation_dtype


@keras.saving.register_keras_serializable(package="Similarity")
class VicReg(GlobalBatchLoss):
    """VICReg: invariance, variance and covariance regularisation.

    From Bardes, Ponce & LeCun, "VICReg: Variance-Invariance-Covariance
    Regularization for Self-Supervised Learning", ICLR 2022
    (https://arxiv.org/abs/2105.04906). Called as `loss(z1, z2)` with the
    `[N, D]` embeddings of the two views:

        s(Z, Z') = (1 / (N D)) * sum_b ||z_b - z'_b||^2        (invariance, MSE)
        v(Z)     = (1 / D) * sum_j max(0, gamma - sqrt(Var(z^j) + epsilon))
        c(Z)     = (1 / D) * sum_{i != j} Cov(Z)_ij^2
        L = lambda_ * s(Z, Z') + mu * (v(Z) + v(Z')) / 2 + nu * (c(Z) + c(Z'))

    with the unbiased variance and covariance over the batch
    (`Cov(Z) = (1 / (N - 1)) * sum_b (z_b - mean)(z_b - mean)^T`). The
    factors `1 / D` and `/ 2` are those of the paper's reference code, for
    which the default coefficients were tuned.

    Across replicas: the embeddings are all-gathered, so all three terms, the
    variance hinge and the covariance included, run over the global batch;
    see `GlobalBatchLoss` for the contract.

    Args:
        lambda_: Weight `>= 0` of the invariance term. Defaults to `25.0`.
        mu: Weight `>= 0` of the variance term. Defaults to `25.0`.
        nu: Weight `>= 0` of the covariance term. Defaults to `1.0`.
        gamma: Target standard deviation `> 0` of each feature. Defaults to
            `1.0`.
        epsilon: Constant `>= 0` added to the variance under the square root.
            Defaults to `1e-4`.
        name: Name of the loss. Defaults to `"vic_reg"`.
        reduction: Defaults to `"sum_over_batch_size"`; see `GlobalBatchLoss`.
        dtype: See `GlobalBatchLoss`.

    Returns (when called):
        A scalar tensor.

    Raises:
        ValueError: If a coefficient is negative or `gamma` is not positive;
            on views that are not `[batch, features]` tensors of one shape, on
            a global batch of fewer than 2 samples (checked at run time under
            a strategy), or when `sample_weight` is given.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import VicReg
    >>> z = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0], [0.0, -2.0]])
    >>> float(VicReg(epsilon=0.0)(z, z))  # Var = 8/3 > 1 and Cov = 0 for both features
    0.0
    """

    min_batch_size = 2

    def __init__(
        self,
        lambda_: float = 25.0,
        mu: float = 25.0,
        nu: float = 1.0,
        gamma: float = 1.0,
        epsilon: float = 1e-4,
        name: str | None = "vic_reg",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        self.lambda_ = check_number("lambda_", lambda_, low=0, owner=owner)
        self.mu = check_number("mu", mu, low=0, owner=owner)
        self.nu = check_number("nu", nu, low=0, owner=owner)
        self.gamma = check_number("gamma", gamma, positive=True, owner=owner)
        self.epsilon = check_number("epsilon", epsilon, low=0, owner=owner)
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        dtype = computation_dtype(y_true.dtype)
        za, zb = gather_global_batch(tf.cast(y_true, dtype), tf.cast(y_pred, dtype))
        self._check_global_batch(tf.shape(za)[0])

        invariance = tf.reduce_mean(tf.square(za - zb))
        variance = (self._variance(za) + self._variance(zb)) / 2.0
        covariance = self._covariance(za) + self._covariance(zb)
        return self.lambda_ * invariance + self.mu * variance + self.nu * covariance

    def _variance(self, z: tf.Tensor) -> tf.Tensor:
        centred = z - tf.reduce_mean(z, axis=0)
        unbiased = tf.reduce_sum(tf.square(centred), axis=0) / _bessel(z)
        std = tf.sqrt(unbiased + self.epsilon)
        return tf.reduce_mean(tf.nn.relu(self.gamma - std))

    def _covariance(self, z: tf.Tensor) -> tf.Tensor:
        centred = z - tf.reduce_mean(z, axis=0)
        cov = tf.matmul(centred, centred, transpose_a=True) / _bessel(z)
        off_diagonal = cov - tf.linalg.diag(tf.linalg.diag_part(cov))
        return tf.reduce_sum(tf.square(off_diagonal)) / tf.cast(tf.shape(z)[1], z.dtype)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            lambda_=self.lambda_,
            mu=self.mu,
            nu=self.nu,
            gamma=self.gamma,
            epsilon=self.epsilon,
        )
        return config


def _bessel(z: tf.Tensor) -> tf.Tensor:
    return tf.cast(tf.shape(z)[0] - 1, z.dtype)
