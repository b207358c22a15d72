"""SimCLR: contrast each view with the other views of the batch (Chen et al., ICML 2020)."""

from __future__ import annotations

import keras

from tensorflow_similarity import losses
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec


@register_algorithm
class SimCLR(ContrastiveAlgorithm):
    """SimCLR (v2 heads): NT-Xent between the two views' projections.

    Heads: SimCLR v2's 3-layer projector (2048-2048-128 on ResNet-50, batch
    norm everywhere, the output's centring only), no predictor. Forward:
    `loss(z1, z2)` (`SimCLRLoss`, whose negatives are the global batch's).
    The reference TensorFlow code feeds both views as one batch, so batch
    norm normalises over both.
    """

    name = "simclr"
    title = "SimCLR"
    projector = ProjectorSpec(hidden_layers=2, hidden_dim=2048, output_dim=128, output_bn="center")
    concat_views = True
    paper = "Chen et al., 2020"
    prevents_collapse = "every other image of the batch is a negative"
    across_replicas = "negatives gathered from all replicas"

    def default_loss(self) -> keras.losses.Loss:
        return losses.SimCLRLoss()
