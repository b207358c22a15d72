"""0.17's module path of `MultiShotMemorySampler` and `SingleShotMemorySampler`."""

from tensorflow_similarity.samplers.multi_shot_memory_sampler import MultiShotMemorySampler
from tensorflow_similarity.samplers.single_shot_memory_sampler import SingleShotMemorySampler

__all__ = ["MultiShotMemorySampler", "SingleShotMemorySampler"]
