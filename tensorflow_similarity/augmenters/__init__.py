"""Image augmentation pipelines that make the two views of self-supervised methods.

`ViewAugmenter` turns a batch of images into two independently augmented
views; `simclr_augmenter`, `simsiam_augmenter` and `barlow_augmenter` configure
it with each paper's parameters. `image_ops` holds the per-image random
transforms they are built from.
"""

from tensorflow_similarity.augmenters import image_ops
from tensorflow_similarity.augmenters.barlow import barlow_augmenter
from tensorflow_similarity.augmenters.simclr import simclr_augmenter
from tensorflow_similarity.augmenters.simsiam import simsiam_augmenter
from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter

__all__ = [
    "ViewAugmenter",
    "barlow_augmenter",
    "image_ops",
    "simclr_augmenter",
    "simsiam_augmenter",
]
