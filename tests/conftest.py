"""Test configuration: 8 logical CPU devices, and a fresh Keras state for each test.

The logical devices must exist before TensorFlow initialises its runtime, so
this runs at import time, before any test module touches TensorFlow. The
strategies over them come from `tensorflow_similarity.testing.mirrored_strategy`.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

NUM_LOGICAL_DEVICES = 8

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(
    _cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_DEVICES
)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    import keras

    keras.backend.clear_session(free_memory=False)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")


@pytest.fixture
def float64():
    """Keras' floatx and dtype policy float64 for one test (exactness to ~1e-12), then restored.

    A module whose every test needs it says `pytestmark = pytest.mark.usefixtures("float64")`.
    """
    import keras

    previous = keras.config.floatx()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    yield
    keras.config.set_floatx(previous)
    keras.config.set_dtype_policy(previous)
