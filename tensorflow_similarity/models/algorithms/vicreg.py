"""VICReg: variance, invariance and covariance regularisation (Bardes et al., ICLR 2022)."""

from __future__ import annotations

import keras

from tensorflow_similarity import losses
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec


@register_algorithm
class VICReg(ContrastiveAlgorithm):
    """VICReg: the two views' projections kept close, spread out and decorrelated.

    Heads: a 3-layer projector of 8192 (on ResNet-50), the output layer
    without batch norm, no predictor. Forward: `loss(z1, z2)` (`VicReg`, its
    variance and covariance terms over the global batch). The reference
    implementation calls the encoder once per view.
    """

    name = "vicreg"
    title = "VICReg"
    projector = ProjectorSpec(hidden_layers=2, hidden_dim=8192, output_dim=8192, output_bn=None)
    concat_views = False

    def default_loss(self) -> keras.losses.Loss:
        return losses.VicReg()
