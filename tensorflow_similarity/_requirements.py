"""Import-time check that TensorFlow and Keras 3 (TensorFlow backend) are usable."""

from __future__ import annotations

import importlib.metadata

from packaging.version import Version

MIN_TENSORFLOW = Version("2.16")
MIN_KERAS = Version("3.4")


def check() -> None:
    """Raises ImportError with the install command when the stack is unusable."""
    try:
        import tensorflow as tf
    except ImportError as err:
        raise ImportError(
            "tensorflow-similarity needs TensorFlow >= 2.16, which is not installed. "
            "Install it with the package: pip install 'tensorflow-similarity[tensorflow]' "
            "(GPU wheel) or 'tensorflow-similarity[tensorflow-cpu]'."
        ) from err
    if Version(tf.__version__).release < MIN_TENSORFLOW.release:
        raise ImportError(
            f"tensorflow-similarity needs TensorFlow >= {MIN_TENSORFLOW}, found "
            f"{tf.__version__}. Upgrade with: pip install -U 'tensorflow>={MIN_TENSORFLOW}'."
        )
    import keras

    keras_version = Version(importlib.metadata.version("keras"))
    if keras_version < MIN_KERAS:
        raise ImportError(
            f"tensorflow-similarity needs Keras >= {MIN_KERAS} (Keras 3), found "
            f"{keras_version}. Upgrade with: pip install -U 'keras>={MIN_KERAS}'."
        )
    if keras.backend.backend() != "tensorflow":
        raise ImportError(
            "tensorflow-similarity runs on Keras' TensorFlow backend, but Keras is "
            f"configured for '{keras.backend.backend()}'. Set KERAS_BACKEND=tensorflow "
            "before importing keras."
        )
