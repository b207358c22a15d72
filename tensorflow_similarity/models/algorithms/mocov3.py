"""MoCo v3: queries contrasted with a momentum encoder's keys (Chen, Xie & He, ICCV 2021)."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity import losses
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm, Forward
from tensorflow_similarity.models.algorithms.byol import require_predictor
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec, build_predictor

# The predictor's hidden width is 16 times the projection width (the paper's 4096 on 256).
_PREDICTOR_EXPANSION = 16


@register_algorithm
class MoCoV3(ContrastiveAlgorithm):
    """MoCo v3: InfoNCE of each view's queries against the teacher's keys of the other view.

    Heads: the paper's ResNet projector (3 layers, 4096-4096-256 on ResNet-50,
    batch norm everywhere, the output's without affine) and predictor (2
    layers, 4096-256, its output batch norm without affine); the teacher
    (momentum encoder) copies the backbone and projector, base momentum 0.99.
    Forward: `loss(k2, q1) + loss(k1, q2)` with `MoCoV3Loss` (temperature 0.2,
    scaled by `2 * temperature`), where each replica's queries meet the keys
    of the whole global batch. The reference implementation calls the
    networks once per view.
    """

    name = "mocov3"
    title = "MoCo v3"
    projector = ProjectorSpec(hidden_layers=2, hidden_dim=4096, output_dim=256, output_bn="none")
    concat_views = False
    has_predictor = True
    base_momentum = 0.99

    def default_loss(self) -> keras.losses.Loss:
        return losses.MoCoV3Loss()

    def build_predictor(
        self,
        input_dim: int,
        hidden_dim: int | None = None,
        sync_bn: bool | SyncBatchNormPlugin = False,
    ) -> keras.Model:
        hidden_dim = hidden_dim or _PREDICTOR_EXPANSION * input_dim
        return build_predictor(input_dim, hidden_dim=hidden_dim, sync_bn=sync_bn, output_bn="none")

    def check_heads(self, projector: keras.Model, predictor: keras.Model | None) -> None:
        require_predictor(self, predictor)

    def forward(self, model: Any, view1: Any, view2: Any, loss: Any, training: bool) -> Forward:
        z1, z2 = self.project(model, view1, view2, training)
        q1, q2 = model.encode_views(z1, z2, model.predictor, training)
        k1, k2 = self.teacher_project(model, view1, view2, training)
        return Forward(loss(k2, q1) + loss(k1, q2), z1, q1)
