"""0.17's module path of `ContrastiveAugmenter`, now in `augmenters.legacy`."""

from tensorflow_similarity.augmenters.legacy import ContrastiveAugmenter

__all__ = ["ContrastiveAugmenter"]
