"""Keras callbacks of tensorflow-similarity.

`KNNAccuracy` logs the weighted k-nearest-neighbour accuracy of a model's
embeddings after each epoch; `knn_accuracy` is the metric as a function.
"""

from tensorflow_similarity.callbacks.knn_accuracy import KNNAccuracy, knn_accuracy

__all__ = ["KNNAccuracy", "knn_accuracy"]
