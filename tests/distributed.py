"""Test tooling for distribution: strategies over the logical CPUs that conftest.py creates.

`tests/conftest.py` splits the CPU into 8 logical devices before TensorFlow
starts; `mirrored_strategy(k)` is the one `MirroredStrategy` over the first
`k` of them in this process. Multi-process tests use
`tensorflow_similarity.testing.run_local_workers`.
"""

from __future__ import annotations

import tensorflow as tf

from tensorflow_similarity.testing import run_local_workers

_STRATEGIES: dict[int, tf.distribute.MirroredStrategy] = {}


class _KeyedMirroredStrategy(tf.distribute.MirroredStrategy):
    """A MirroredStrategy whose collective keys cannot collide with another size's."""


def mirrored_strategy(num_replicas: int) -> tf.distribute.MirroredStrategy:
    """Returns the (cached) MirroredStrategy over the first `num_replicas` logical CPUs.

    Two MirroredStrategy objects of different sizes in one process would reuse
    the same collective group keys, so each size gets its own key range.
    """
    if num_replicas not in _STRATEGIES:
        cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
        if num_replicas > len(cpus):
            raise ValueError(
                f"{num_replicas} replicas need as many logical CPUs; tests/conftest.py made "
                f"{len(cpus)}."
            )
        cls = type(
            f"MirroredStrategy{num_replicas}",
            (_KeyedMirroredStrategy,),
            {"_collective_key_base": 10_000 * num_replicas},
        )
        _STRATEGIES[num_replicas] = cls(cpus[:num_replicas])
    return _STRATEGIES[num_replicas]


__all__ = ["mirrored_strategy", "run_local_workers"]
