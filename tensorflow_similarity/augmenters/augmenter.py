"""0.17 path: re-exports `Augmenter`.

Defined in `tensorflow_similarity.augmenters.legacy`.
"""

from tensorflow_similarity.augmenters.legacy import Augmenter

__all__ = ["Augmenter"]
