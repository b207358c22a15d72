"""The architecture builders by name, with the smallest images each accepts.

For command lines and configuration files that pick a backbone by name.
"""

from __future__ import annotations

from collections.abc import Callable

import keras

from tensorflow_similarity.architectures.arguments import MIN_IMAGE_SIZE
from tensorflow_similarity.architectures.convnext import ConvNeXtSim
from tensorflow_similarity.architectures.efficientnet import EfficientNetSim
from tensorflow_similarity.architectures.resnet18 import MIN_CIFAR_STEM_SIZE, ResNet18Sim
from tensorflow_similarity.architectures.resnet50 import ResNet50Sim

BUILDERS: dict[str, Callable[..., keras.Model]] = {
    "resnet18": ResNet18Sim,
    "resnet50": ResNet50Sim,
    "efficientnet": EfficientNetSim,
    "convnext": ConvNeXtSim,
}

# Height and width below which each builder raises (ResNet-18's CIFAR stem keeps 8x8 whole).
MIN_IMAGE_SIZES: dict[str, int] = {
    "resnet18": MIN_CIFAR_STEM_SIZE,
    "resnet50": MIN_IMAGE_SIZE,
    "efficientnet": MIN_IMAGE_SIZE,
    "convnext": MIN_IMAGE_SIZE,
}
