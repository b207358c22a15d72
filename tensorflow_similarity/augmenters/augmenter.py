"""0.17's module path of `Augmenter`, now in `tensorflow_similarity.augmenters.legacy`."""

from tensorflow_similarity.augmenters.legacy import Augmenter

__all__ = ["Augmenter"]
