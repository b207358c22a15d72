"""Labelled image sets for the `tfsim` command and the examples: glyphs, digits, folders, TFDS.

`load_data(spec, image_size)` loads any of them as an `ImageData` (train and
test images in `[0, 1]`, split per class): `"glyphs"` (`glyphs.py`, drawn
with matplotlib's fonts), `"digits"` (`digits.py`, scikit-learn's), a folder
of class sub-folders (`folders.py`) or `"tfds:NAME"` (`tfds.py`). None needs
a download but TFDS.
"""

from tensorflow_similarity.datasets.folders import IMAGE_EXTENSIONS, read_image
from tensorflow_similarity.datasets.glyphs import Glyphs, load_glyphs
from tensorflow_similarity.datasets.image_data import (
    EMBEDDED_SOURCES,
    ImageData,
    check_data_spec,
    load_data,
)

__all__ = [
    "EMBEDDED_SOURCES",
    "IMAGE_EXTENSIONS",
    "Glyphs",
    "ImageData",
    "check_data_spec",
    "load_data",
    "load_glyphs",
    "read_image",
]
