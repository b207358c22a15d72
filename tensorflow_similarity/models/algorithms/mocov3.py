"""MoCo v3: queries contrasted with a momentum encoder's keys (Chen, Xie & He, ICCV 2021)."""

from __future__ import annotations

import keras

from tensorflow_similarity import losses
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec


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
    predictor_hidden_ratio = 16
    predictor_output_bn = "none"
    predictor_reason = "the queries are the predictor's outputs"
    has_key_encoder = True
    base_momentum = 0.99
    paper = "Chen, Xie & He, 2021"
    prevents_collapse = "the other images' teacher keys are negatives"
    across_replicas = "keys gathered from all replicas; the teacher moves alike on every replica"

    def default_loss(self) -> keras.losses.Loss:
        return losses.MoCoV3Loss()
