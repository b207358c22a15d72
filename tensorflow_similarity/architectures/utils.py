"""0.17's module path of `convert_sync_batchnorm`, now in `tensorflow_similarity.distribute`."""

from tensorflow_similarity.distribute import convert_sync_batchnorm

__all__ = ["convert_sync_batchnorm"]
