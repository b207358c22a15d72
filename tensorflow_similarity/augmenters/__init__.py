"""Image augmentation pipelines that make the views self-supervised methods train on.

`ViewAugmenter` turns a batch of images into two independently augmented
views; `simclr_augmenter`, `simsiam_augmenter` and `barlow_augmenter` configure
it with each paper's parameters. `MultiCropAugmenter` (and
`multicrop_augmenter`, DINO's parameters) makes DINO's multi-crop views
instead: two global and several smaller local crops of each image.
`image_ops` holds the per-image random transforms they are built from.
`GlyphAugmenter` makes the views of line drawings (glyphs) by affine warps
and stroke width instead. `Augmenter`, `SimCLRAugmenter`,
`BarlowAugmenter` and `ContrastiveAugmenter` are tensorflow-similarity 0.17's
classes (`augmenter(x, y, num_views, is_warmup)` -> list of views), kept for
0.17 code.
"""

from tensorflow_similarity.augmenters import augmentation_utils, image_ops
from tensorflow_similarity.augmenters.barlow import barlow_augmenter
from tensorflow_similarity.augmenters.dino import multicrop_augmenter
from tensorflow_similarity.augmenters.glyph_augmenter import GlyphAugmenter
from tensorflow_similarity.augmenters.legacy import (
    Augmenter,
    BarlowAugmenter,
    ContrastiveAugmenter,
    SimCLRAugmenter,
)
from tensorflow_similarity.augmenters.multicrop import MultiCropAugmenter
from tensorflow_similarity.augmenters.simclr import simclr_augmenter
from tensorflow_similarity.augmenters.simsiam import simsiam_augmenter
from tensorflow_similarity.augmenters.view_augmenter import ViewAugmenter

__all__ = [
    "Augmenter",
    "BarlowAugmenter",
    "ContrastiveAugmenter",
    "GlyphAugmenter",
    "MultiCropAugmenter",
    "SimCLRAugmenter",
    "ViewAugmenter",
    "augmentation_utils",
    "barlow_augmenter",
    "image_ops",
    "multicrop_augmenter",
    "simclr_augmenter",
    "simsiam_augmenter",
]
