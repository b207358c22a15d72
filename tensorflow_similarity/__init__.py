"""tensorflow-similarity: metric and self-supervised learning for Keras 3.

Importing the package registers every layer, loss and model with Keras'
serialisation registry (package "Similarity"), so `.keras` files saved from
this package load with `keras.saving.load_model` and no `custom_objects`.
"""

from __future__ import annotations

__version__ = "0.18.0.dev0"

from tensorflow_similarity import _tfsim_start

# Before anything imports TensorFlow: it reads its log level once, on import.
_tfsim_start.quiet_tensorflow_log()

from tensorflow_similarity import _requirements  # noqa: E402

_requirements.check()

from tensorflow_similarity import (  # noqa: E402
    architectures,
    augmenters,
    callbacks,
    classification_metrics,
    distribute,
    evaluators,
    indexer,
    layers,
    losses,
    matchers,
    models,
    retrieval_metrics,
    samplers,
    schedules,
    search,
    stores,
    training_metrics,
    types,
    utils,
)

__all__ = [
    "architectures",
    "augmenters",
    "callbacks",
    "classification_metrics",
    "distribute",
    "evaluators",
    "indexer",
    "layers",
    "losses",
    "matchers",
    "models",
    "retrieval_metrics",
    "samplers",
    "schedules",
    "search",
    "stores",
    "training_metrics",
    "types",
    "utils",
]
