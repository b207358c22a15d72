"""SimSiam: a predictor on one branch, a stop-gradient on the other (Chen & He, CVPR 2021)."""

from __future__ import annotations

import keras

from tensorflow_similarity import augmenters, losses
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec


@register_algorithm
class SimSiam(ContrastiveAlgorithm):
    """SimSiam: each view's prediction regresses the other view's projection.

    Heads: the paper's 3-layer projector (2048-2048-2048 on ResNet-50, batch
    norm on every layer, the output's without affine) and a 2-layer
    predictor whose bottleneck is a quarter of the projection width. Forward:
    `0.5 * (loss(z2, p1) + loss(z1, p2))`, the loss stopping the gradient of
    its target (`SimSiamLoss`). The reference implementation calls the
    encoder once per view.
    """

    name = "simsiam"
    title = "SimSiam"
    projector = ProjectorSpec(hidden_layers=2, hidden_dim=2048, output_dim=2048, output_bn="none")
    concat_views = False
    has_predictor = True
    paper = "Chen & He, 2021"
    prevents_collapse = "a predictor head and a stop-gradient"
    across_replicas = "the loss is a mean over the global batch"

    def photograph_views(
        self, image_size: int, seed: int | None = None
    ) -> augmenters.ViewAugmenter:
        return augmenters.simsiam_augmenter(image_size, seed=seed)

    def default_loss(self) -> keras.losses.Loss:
        return losses.SimSiamLoss()
