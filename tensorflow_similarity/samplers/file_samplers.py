"""0.17's module path of `MultiShotFileSampler` and `load_image`."""

from typing import TypeVar

from tensorflow_similarity.samplers.multi_shot_file_sampler import MultiShotFileSampler, load_image
from tensorflow_similarity.types import FloatTensor, IntTensor

# 0.17's type variable of this module.
T = TypeVar("T", FloatTensor, IntTensor)

__all__ = ["MultiShotFileSampler", "T", "load_image"]
