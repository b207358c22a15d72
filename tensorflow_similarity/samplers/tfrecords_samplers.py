"""0.17 path: re-exports `TFRecordDatasetSampler`.

Defined in `tensorflow_similarity.samplers.tfrecord_dataset_sampler`.
"""

from tensorflow_similarity.samplers.tfrecord_dataset_sampler import TFRecordDatasetSampler

__all__ = ["TFRecordDatasetSampler"]
