"""Keras callbacks of tensorflow-similarity.

`EvalCallback` logs 0.17's matching and retrieval metrics of an index of
held-out targets after each epoch;
`KNNAccuracy` logs the weighted k-nearest-neighbour accuracy of a model's
embeddings after each epoch; `knn_accuracy` is the metric as a function;
`StopOnNonFinite` raises `TrainingDiverged` at the first non-finite loss or
weight (the models' `fit` adds one by default); `BatchNormStatistics`
recomputes batch norm's statistics from images after each epoch;
`EpochBackup` saves the weights and optimizer state after each epoch, to
resume from.
"""

from tensorflow_similarity.callbacks.batch_norm_statistics import BatchNormStatistics
from tensorflow_similarity.callbacks.epoch_backup import EpochBackup
from tensorflow_similarity.callbacks.eval_callback import EvalCallback
from tensorflow_similarity.callbacks.knn_accuracy import KNNAccuracy, knn_accuracy
from tensorflow_similarity.callbacks.linear_probe import OnlineLinearProbe
from tensorflow_similarity.callbacks.stop_on_non_finite import StopOnNonFinite, TrainingDiverged

__all__ = [
    "BatchNormStatistics",
    "EpochBackup",
    "EvalCallback",
    "KNNAccuracy",
    "OnlineLinearProbe",
    "StopOnNonFinite",
    "TrainingDiverged",
    "knn_accuracy",
]
