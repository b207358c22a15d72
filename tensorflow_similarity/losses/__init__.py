"""Losses whose value and gradients under `tf.distribute` are those of the global batch."""

from __future__ import annotations

from tensorflow_similarity.losses.barlow import Barlow
from tensorflow_similarity.losses.simclr import SimCLRLoss
from tensorflow_similarity.losses.simsiam import SimSiamLoss
from tensorflow_similarity.losses.vicreg import VicReg

__all__ = ["Barlow", "SimCLRLoss", "SimSiamLoss", "VicReg"]
