"""Losses whose value and gradients under `tf.distribute` are those of the global batch.

Every loss follows the contract of `GlobalBatchLoss`, its base. The
self-supervised ones are called as `loss(view1_output, view2_output)`, the
metric ones as `loss(labels, embeddings)` (see `MetricLoss`).
"""

from __future__ import annotations

from tensorflow_similarity.losses.arcface_loss import ArcFaceLoss
from tensorflow_similarity.losses.barlow import Barlow, BarlowTwinsLoss
from tensorflow_similarity.losses.byol import BYOLLoss
from tensorflow_similarity.losses.circle_loss import CircleLoss
from tensorflow_similarity.losses.dino import (
    DINOLoss,
    dino_center_update,
    dino_teacher_probabilities,
)
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss
from tensorflow_similarity.losses.metric_loss import MetricLoss
from tensorflow_similarity.losses.mocov2 import MoCoV2Loss
from tensorflow_similarity.losses.mocov3 import MoCoV3Loss
from tensorflow_similarity.losses.multinegrank_loss import MultiNegativesRankLoss
from tensorflow_similarity.losses.multisim_loss import MultiSimilarityLoss
from tensorflow_similarity.losses.pn_loss import PNLoss
from tensorflow_similarity.losses.proxy_anchor_loss import ProxyAnchorLoss
from tensorflow_similarity.losses.proxy_loss import ProxyLoss
from tensorflow_similarity.losses.proxy_nca_loss import ProxyNCALoss
from tensorflow_similarity.losses.simclr import SimCLRLoss
from tensorflow_similarity.losses.simsiam import SimSiamLoss
from tensorflow_similarity.losses.softnn_loss import SoftNearestNeighborLoss
from tensorflow_similarity.losses.supcon_loss import SupConLoss
from tensorflow_similarity.losses.swav import SwAVLoss, sinkhorn_knopp
from tensorflow_similarity.losses.triplet_loss import TripletLoss
from tensorflow_similarity.losses.vicreg import VicReg, VICRegLoss
from tensorflow_similarity.losses.xbm_loss import XBM

__all__ = [
    "ArcFaceLoss",
    "BYOLLoss",
    "Barlow",
    "BarlowTwinsLoss",
    "CircleLoss",
    "DINOLoss",
    "GlobalBatchLoss",
    "MetricLoss",
    "MoCoV2Loss",
    "MoCoV3Loss",
    "MultiNegativesRankLoss",
    "MultiSimilarityLoss",
    "PNLoss",
    "ProxyAnchorLoss",
    "ProxyLoss",
    "ProxyNCALoss",
    "SimCLRLoss",
    "SimSiamLoss",
    "SoftNearestNeighborLoss",
    "SupConLoss",
    "SwAVLoss",
    "TripletLoss",
    "VICRegLoss",
    "VicReg",
    "XBM",
    "dino_center_update",
    "dino_teacher_probabilities",
    "sinkhorn_knopp",
]
