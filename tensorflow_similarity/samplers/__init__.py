"""Samplers of class-balanced batches for metric learning.

A metric loss needs positives in every batch: a batch holds
`classes_per_batch` classes with `examples_per_class_per_batch` examples each.
`MultiShotMemorySampler` draws them from arrays in memory,
`TFDatasetMultiShotMemorySampler` from a TFDS or `tf.data` dataset read into
memory, `MultiShotFileSampler` from image files read as drawn,
`SingleShotMemorySampler` makes each example its own class and leaves the
positives to an augmenter; all are Keras 3 `PyDataset`s (`Sampler` is their
base) that `fit` takes directly. `TFDataSampler` builds the same batches as a
`tf.data` pipeline; `TFRecordDatasetSampler` builds one from TFRecord shards
stored in class blocks. `select_examples` picks a random subset by class and count.
Under a `tf.distribute` strategy one batch is the global batch, split over
the replicas.
"""

from tensorflow_similarity.samplers.multi_shot_file_sampler import MultiShotFileSampler, load_image
from tensorflow_similarity.samplers.multi_shot_memory_sampler import MultiShotMemorySampler
from tensorflow_similarity.samplers.sampler import Sampler
from tensorflow_similarity.samplers.select_examples import select_examples
from tensorflow_similarity.samplers.single_shot_memory_sampler import SingleShotMemorySampler
from tensorflow_similarity.samplers.tf_data_sampler import TFDataSampler
from tensorflow_similarity.samplers.tf_dataset_multi_shot_memory_sampler import (
    TFDatasetMultiShotMemorySampler,
)
from tensorflow_similarity.samplers.tfrecord_dataset_sampler import TFRecordDatasetSampler

__all__ = [
    "MultiShotFileSampler",
    "MultiShotMemorySampler",
    "Sampler",
    "SingleShotMemorySampler",
    "TFDataSampler",
    "TFDatasetMultiShotMemorySampler",
    "TFRecordDatasetSampler",
    "load_image",
    "select_examples",
]
