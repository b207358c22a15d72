"""0.17's module path of `TFRecordDatasetSampler`."""

from tensorflow_similarity.samplers.tfrecord_dataset_sampler import TFRecordDatasetSampler

__all__ = ["TFRecordDatasetSampler"]
