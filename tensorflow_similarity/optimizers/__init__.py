"""Optimizers for training at large global batches.

`LARS` is momentum SGD with a layer-wise trust ratio, weight decay inside the
update and batch norm's parameters and the biases left out of both, as the
self-supervised papers train at batches of thousands; `scaled_learning_rate`
scales a base learning rate to the global batch (linear or square-root rule).
"""

from tensorflow_similarity.optimizers.lars import LARS, is_bias_or_norm
from tensorflow_similarity.optimizers.scaled_learning_rate import scaled_learning_rate

__all__ = ["LARS", "is_bias_or_norm", "scaled_learning_rate"]
