"""Test configuration: 8 logical CPU devices and one MirroredStrategy per size.

The logical devices must exist before TensorFlow initialises its runtime, so
this runs at import time, before any test module touches TensorFlow.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

NUM_LOGICAL_DEVICES = 8

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_DEVICES
)
LOGICAL_CPUS = [d.name for d in tf.config.list_logical_devices("CPU")]

_STRATEGIES: dict[int, tf.distribute.MirroredStrategy] = {}
BENCHMARK_DIR = Path(__file__).resolve().parents[1] / "benchmark"


def load_benchmark(name: str) -> ModuleType:
    """Imports `benchmark/<name>.py` without running it, as `benchmark/report.py` does.

    The scripts import `benchmark_common` by file name, so their folder goes
    on `sys.path` (at the end: it shadows nothing).
    """
    if str(BENCHMARK_DIR) not in sys.path:
        sys.path.append(str(BENCHMARK_DIR))
    return importlib.import_module("benchmark_common").load_benchmark_module(name)


class _KeyedMirroredStrategy(tf.distribute.MirroredStrategy):
    """A MirroredStrategy whose collective keys cannot collide with another size's."""


def mirrored_strategy(num_replicas: int) -> tf.distribute.MirroredStrategy:
    """Returns the (cached) MirroredStrategy over the first `num_replicas` logical CPUs.

    Two MirroredStrategy objects of different sizes in one process would reuse
    the same collective group keys, so each size gets its own key range.
    """
    if num_replicas not in _STRATEGIES:
        cls = type(
            f"MirroredStrategy{num_replicas}",
            (_KeyedMirroredStrategy,),
            {"_collective_key_base": 10_000 * num_replicas},
        )
        _STRATEGIES[num_replicas] = cls(LOGICAL_CPUS[:num_replicas])
    return _STRATEGIES[num_replicas]


@pytest.fixture
def strategy_factory():
    """Returns a function `k -> MirroredStrategy` over the first k logical CPUs."""
    return mirrored_strategy


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    import keras

    keras.backend.clear_session(free_memory=False)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")
