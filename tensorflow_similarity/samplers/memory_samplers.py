"""0.17 path: re-exports `MultiShotMemorySampler`, `SingleShotMemorySampler`.

Defined in `tensorflow_similarity.samplers.multi_shot_memory_sampler` and
`tensorflow_similarity.samplers.single_shot_memory_sampler`.
"""

from tensorflow_similarity.samplers.multi_shot_memory_sampler import MultiShotMemorySampler
from tensorflow_similarity.samplers.single_shot_memory_sampler import SingleShotMemorySampler

__all__ = ["MultiShotMemorySampler", "SingleShotMemorySampler"]
