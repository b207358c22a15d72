"""BYOL: an online network predicts a momentum teacher's projection (Grill et al., 2020)."""

from __future__ import annotations

import keras

from tensorflow_similarity import losses
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec


@register_algorithm
class BYOL(ContrastiveAlgorithm):
    """BYOL: the student's prediction of one view regresses the teacher's projection of the other.

    Heads: the paper's projector (one hidden layer, 4096-256 on ResNet-50,
    batch norm on the hidden layer) and a predictor of the same shape (its
    hidden width 16 times the projection's); the teacher is a momentum copy of
    the backbone and projector, base momentum 0.996. Forward: `loss(t2, p1) +
    loss(t1, p2)` with `BYOLLoss`, `2 - 2 cos`, summed over both directions as
    the paper does; the teacher's projections `t` carry no gradient. The
    reference implementation calls the networks once per view.
    """

    name = "byol"
    title = "BYOL"
    projector = ProjectorSpec(hidden_layers=1, hidden_dim=4096, output_dim=256, output_bn=None)
    concat_views = False
    has_predictor = True
    predictor_hidden_ratio = 16
    predictor_reason = "the student's predictor is what keeps it from copying the teacher"
    has_key_encoder = True
    base_momentum = 0.996
    paper = "Grill et al., 2020"
    prevents_collapse = "a predictor regresses a momentum teacher's projection"
    across_replicas = (
        "the loss is a mean over the global batch; the teacher moves alike on every replica"
    )

    def default_loss(self) -> keras.losses.Loss:
        return losses.BYOLLoss()
