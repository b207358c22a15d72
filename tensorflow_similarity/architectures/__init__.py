"""Backbones with the shared similarity head, each with optional synchronised batch norm.

Every builder takes `input_shape, embedding_size=128, weights=None,
trainable="full", l2_norm=True, include_top=True, pooling="gem", gem_p=3.0,
sync_bn=False` and returns a Keras model. `sync_bn` is `False`, `True` (sync
all replicas) or a `SyncBatchNormPlugin` such as `GroupSyncBatchNorm(2)`.

* `ResNet18Sim`, `ResNet50Sim`: written here; `build_resnet18` /
  `build_resnet50` create `SyncBatchNormalization` layers directly.
* `EfficientNetSim`, `ConvNeXtSim`: `keras.applications` models whose batch
  norm is upgraded by the rebuild utility (`convert_sync_batchnorm`).
* `BackboneSim`: the same head and `sync_bn` for any backbone model.
"""

from tensorflow_similarity.architectures.backbone import BackboneSim
from tensorflow_similarity.architectures.convnext import ConvNeXtSim, build_convnext
from tensorflow_similarity.architectures.efficientnet import EfficientNetSim, build_efficientnet
from tensorflow_similarity.architectures.registry import BUILDERS, MIN_IMAGE_SIZES
from tensorflow_similarity.architectures.resnet18 import ResNet18Sim, build_resnet18
from tensorflow_similarity.architectures.resnet50 import ResNet50Sim, build_resnet50

__all__ = [
    "BUILDERS",
    "MIN_IMAGE_SIZES",
    "BackboneSim",
    "ConvNeXtSim",
    "EfficientNetSim",
    "ResNet18Sim",
    "ResNet50Sim",
    "build_convnext",
    "build_efficientnet",
    "build_resnet18",
    "build_resnet50",
]
