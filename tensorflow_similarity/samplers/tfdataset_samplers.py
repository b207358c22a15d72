"""0.17's module path of `TFDatasetMultiShotMemorySampler`, and its annotations."""

from collections.abc import Callable
from typing import TypeVar

from tensorflow_similarity.samplers.tf_dataset_multi_shot_memory_sampler import (
    TFDatasetMultiShotMemorySampler,
)
from tensorflow_similarity.types import FloatTensor, IntTensor

# 0.17's annotations: a `(x, y) -> (x, y)` preprocessing function, and a type variable.
PreProcessFn = Callable[[FloatTensor, IntTensor], tuple[FloatTensor, IntTensor]]
T = TypeVar("T", FloatTensor, IntTensor)

__all__ = ["PreProcessFn", "T", "TFDatasetMultiShotMemorySampler"]
