"""Keras callbacks of tensorflow-similarity.

`EvalCallback` logs 0.17's matching and retrieval metrics of an index of
held-out targets after each epoch;
`KNNAccuracy` logs the weighted k-nearest-neighbour accuracy of a model's
embeddings after each epoch; `knn_accuracy` is the metric as a function.
"""

from tensorflow_similarity.callbacks.eval_callback import EvalCallback
from tensorflow_similarity.callbacks.knn_accuracy import KNNAccuracy, knn_accuracy

__all__ = ["EvalCallback", "KNNAccuracy", "knn_accuracy"]
