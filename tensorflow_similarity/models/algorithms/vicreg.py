"""VICReg: variance, invariance and covariance regularisation (Bardes et al., ICLR 2022)."""

from __future__ import annotations

import keras

from tensorflow_similarity import augmenters, losses
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
    paper = "Bardes et al., 2022"
    prevents_collapse = "variance, invariance and covariance terms"
    across_replicas = "statistics over the global batch"

    def photograph_views(
        self, image_size: int, seed: int | None = None
    ) -> augmenters.ViewAugmenter:
        # VICReg trains on Barlow Twins' views (Bardes et al., 2022, appendix C).
        return augmenters.barlow_augmenter(image_size, seed=seed)

    def default_loss(self) -> keras.losses.Loss:
        return losses.VicReg()
