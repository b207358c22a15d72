"""Barlow Twins: the views' cross-correlation driven to the identity (Zbontar et al., 2021)."""

from __future__ import annotations

import keras

from tensorflow_similarity import augmenters, losses
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec


@register_algorithm
class BarlowTwins(ContrastiveAlgorithm):
    """Barlow Twins: redundancy reduction between the two views' projections.

    Heads: a 3-layer projector of 8192 (on ResNet-50), the output layer
    without batch norm (the loss standardises), no predictor. Forward:
    `loss(z1, z2)` (`Barlow`, over the global batch's cross-correlation). The
    reference implementation calls the encoder once per view.
    """

    name = "barlow"
    title = "Barlow Twins"
    projector = ProjectorSpec(hidden_layers=2, hidden_dim=8192, output_dim=8192, output_bn=None)
    concat_views = False
    paper = "Zbontar et al., 2021"
    prevents_collapse = "the views' cross-correlation is pushed to the identity"
    across_replicas = "cross-correlation over the global batch"

    def photograph_views(
        self, image_size: int, seed: int | None = None
    ) -> augmenters.ViewAugmenter:
        return augmenters.barlow_augmenter(image_size, seed=seed)

    def default_loss(self) -> keras.losses.Loss:
        return losses.Barlow()
