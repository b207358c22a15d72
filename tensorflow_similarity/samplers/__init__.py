"""Samplers of class-balanced batches for metric learning.

A metric loss needs positives in every batch: a batch holds
`classes_per_batch` classes with `examples_per_class_per_batch` examples each.
`MultiShotMemorySampler` draws them from arrays in memory,
`TFDatasetMultiShotMemorySampler` from a TFDS or `tf.data` dataset read into
memory, `SingleShotMemorySampler` makes each example its own class and leaves
the positives to an augmenter; all are Keras 3 `PyDataset`s (`Sampler` is their
base) that `fit` takes directly. `TFDataSampler` builds the same batches as a
`tf.data` pipeline. `select_examples` picks a random subset by class and count.
Under a `tf.distribute` strategy one batch is the global batch, split over
the replicas.
"""

from tensorflow_similarity.samplers.multi_shot_memory_sampler import MultiShotMemorySampler
from tensorflow_similarity.samplers.sampler import Sampler
from tensorflow_similarity.samplers.select_examples import select_examples
from tensorflow_similarity.samplers.single_shot_memory_sampler import SingleShotMemorySampler
from tensorflow_similarity.samplers.tf_data_sampler import TFDataSampler
from tensorflow_similarity.samplers.tf_dataset_multi_shot_memory_sampler import (
    TFDatasetMultiShotMemorySampler,
)

__all__ = [
    "MultiShotMemorySampler",
    "Sampler",
    "SingleShotMemorySampler",
    "TFDataSampler",
    "TFDatasetMultiShotMemorySampler",
    "select_examples",
]
