"""0.17 path: re-exports `architectures`, `augmenters`, `callbacks` and 15 more.

0.17's `tensorflow_similarity.api`: every component subpackage, under one module.

`SimilarityModel` (a Keras model with an index: `index`, `lookup`,
`calibrate`, `match`), the metric losses (`MetricLoss` and its subclasses,
computed with the `distances`), the samplers of class-balanced batches, and
the `Indexer` with its search, store and evaluator. Importing this module
imports `visualization`, and so needs matplotlib.
"""

from tensorflow_similarity import (
    architectures,
    augmenters,
    callbacks,
    classification_metrics,
    distances,
    evaluators,
    indexer,
    layers,
    losses,
    matchers,
    models,
    retrieval_metrics,
    samplers,
    search,
    stores,
    training_metrics,
    utils,
    visualization,
)

__all__ = [
    "architectures",
    "augmenters",
    "callbacks",
    "classification_metrics",
    "distances",
    "evaluators",
    "indexer",
    "layers",
    "losses",
    "matchers",
    "models",
    "retrieval_metrics",
    "samplers",
    "search",
    "stores",
    "training_metrics",
    "utils",
    "visualization",
]
