"""0.17 path: re-exports `ContrastiveAugmenter`.

Defined in `tensorflow_similarity.augmenters.legacy`.
"""

from tensorflow_similarity.augmenters.legacy import ContrastiveAugmenter

__all__ = ["ContrastiveAugmenter"]
