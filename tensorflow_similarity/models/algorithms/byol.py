"""BYOL: an online network predicts a momentum teacher's projection (Grill et al., 2020)."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity import losses
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm, Forward
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec, build_predictor

# The predictor's hidden width is 16 times the projection width (the paper's 4096 on 256).
_PREDICTOR_EXPANSION = 16


def require_predictor(method: ContrastiveAlgorithm, predictor: keras.Model | None) -> None:
    """Raises `ValueError` when a method that needs a predictor has none."""
    if predictor is None:
        raise ValueError(
            f"{method.display_name} needs a predictor model (the student's predictor is what "
            "keeps it from copying the teacher). Pass predictor=..., or build all heads with "
            f"create_contrastive_model(backbone, {method.name!r})."
        )


@register_algorithm
class BYOL(ContrastiveAlgorithm):
    """BYOL: the student's prediction of one view regresses the teacher's projection of the other.

    Heads: the paper's projector (one hidden layer, 4096-256 on ResNet-50,
    batch norm on the hidden layer) and a predictor of the same shape; the
    teacher is a momentum copy of the backbone and projector, base momentum
    0.996. Forward: `loss(t2, p1) + loss(t1, p2)` with `BYOLLoss`, `2 - 2 cos`,
    summed over both directions as the paper does; the teacher's projections
    `t` carry no gradient. The reference implementation calls the networks
    once per view.
    """

    name = "byol"
    title = "BYOL"
    projector = ProjectorSpec(hidden_layers=1, hidden_dim=4096, output_dim=256, output_bn=None)
    concat_views = False
    has_predictor = True
    base_momentum = 0.996

    def default_loss(self) -> keras.losses.Loss:
        return losses.BYOLLoss()

    def build_predictor(
        self,
        input_dim: int,
        hidden_dim: int | None = None,
        sync_bn: bool | SyncBatchNormPlugin = False,
    ) -> keras.Model:
        hidden_dim = hidden_dim or _PREDICTOR_EXPANSION * input_dim
        return build_predictor(input_dim, hidden_dim=hidden_dim, sync_bn=sync_bn)

    def check_heads(self, projector: keras.Model, predictor: keras.Model | None) -> None:
        require_predictor(self, predictor)

    def forward(self, model: Any, view1: Any, view2: Any, loss: Any, training: bool) -> Forward:
        z1, z2 = self.project(model, view1, view2, training)
        p1, p2 = model.encode_views(z1, z2, model.predictor, training)
        t1, t2 = self.teacher_project(model, view1, view2, training)
        return Forward(loss(t2, p1) + loss(t1, p2), z1, p1)
