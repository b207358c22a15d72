"""0.17 path: re-exports `convert_sync_batchnorm`.

Defined in `tensorflow_similarity.distribute`.
"""

from tensorflow_similarity.distribute import convert_sync_batchnorm

__all__ = ["convert_sync_batchnorm"]
