"""tensorflow-similarity: metric and self-supervised learning for Keras 3.

Importing the package registers every layer, loss and model with Keras'
serialisation registry (package "Similarity"), so `.keras` files saved from
this package load with `keras.saving.load_model` and no `custom_objects`.
Importing it has no other effect on the process: the `tfsim` command quiets
TensorFlow's log from its own entry point (the `tfsim` module, outside the
package).
"""

from __future__ import annotations

import importlib

__version__ = "0.18.0.dev0"

from tensorflow_similarity import _requirements

_requirements.check()

from tensorflow_similarity import (  # noqa: E402
    algebra,
    architectures,
    augmenters,
    callbacks,
    classification_metrics,
    distances,
    distribute,
    evaluators,
    indexer,
    layers,
    losses,
    matchers,
    models,
    optimizers,
    retrieval_metrics,
    samplers,
    schedules,
    search,
    serving,
    stores,
    training_metrics,
    types,
    utils,
)

__all__ = [
    "algebra",
    "architectures",
    "augmenters",
    "callbacks",
    "classification_metrics",
    "distances",
    "distribute",
    "evaluators",
    "indexer",
    "layers",
    "losses",
    "matchers",
    "models",
    "optimizers",
    "retrieval_metrics",
    "samplers",
    "schedules",
    "search",
    "serving",
    "stores",
    "training_metrics",
    "types",
    "utils",
]


def __getattr__(name: str):
    # `visualization` (0.17's attribute) needs matplotlib, an optional extra: it is
    # imported on first use, so that importing the package does not need it.
    if name == "visualization":
        return importlib.import_module("tensorflow_similarity.visualization")
    raise AttributeError(f"module 'tensorflow_similarity' has no attribute {name!r}")
