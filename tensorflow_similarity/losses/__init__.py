"""Self-supervised losses whose value and gradients are those of the global batch.

Each is called as `loss(view1_output, view2_output)` and returns a scalar.
Under `tf.distribute` every replica computes the loss of the whole global batch
(gathering what it needs from the other replicas), and Keras' usual `1 / K`
scaling plus the optimizer's sum over replicas give exactly the single-device
gradient of the concatenated batch.
"""

from __future__ import annotations

from tensorflow_similarity.losses.barlow import Barlow
from tensorflow_similarity.losses.simclr import SimCLRLoss
from tensorflow_similarity.losses.simsiam import SimSiamLoss
from tensorflow_similarity.losses.vicreg import VicReg

__all__ = ["Barlow", "SimCLRLoss", "SimSiamLoss", "VicReg"]
