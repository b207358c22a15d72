"""Labelled image sets for the `tfsim` command and the examples: digits, image folders, TFDS.

`load_data(spec, image_size)` returns an `ImageData`: train and test images,
float32 in `[0, 1]`, `[n, image_size, image_size, 3]`, with integer labels,
split per class (stratified) and deterministically from `seed`. Four
sources, chosen by `spec`:

* `"glyphs"`: characters drawn with the fonts matplotlib ships
  (`tensorflow_similarity.datasets.load_glyphs`: 2,626 images of 143
  classes, the 62 Latin letters and digits first, then 81 Greek and
  Cyrillic letters), no network.
* `"digits"`: scikit-learn's handwritten digits (1,797 real 8x8 greyscale
  images of 10 classes, shipped inside scikit-learn, so no network), resized.
* a folder holding one sub-folder per class, each with image files (PNG,
  JPEG, GIF, BMP), e.g. `flowers/roses/1.jpg`.
* `"tfds:NAME"`: the `train` split of a TensorFlow Datasets dataset (needs
  `tensorflow-datasets` and its data, downloaded or reachable).

`check_data_spec(spec)` does the checks that need no decoding (the folder
exists and holds images, TFDS is installed), so a command can fail fast.
Every problem is a `ValueError` whose message says what was wrong and what
to do instead.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from tensorflow_similarity._validation import is_int
from tensorflow_similarity.datasets._resize import resize_images
from tensorflow_similarity.datasets.digits import load_digits_images
from tensorflow_similarity.datasets.folders import decode_files, image_files, subset_files
from tensorflow_similarity.datasets.glyphs import load_glyphs
from tensorflow_similarity.datasets.tfds import TFDS_PREFIX, load_tfds_images

# The embedded sources, and the image side each is shown at by default: the digits' own 8x8,
# and glyphs at a side where letters stay legible and a ResNet-18 trains in minutes on CPUs.
EMBEDDED_SOURCES = {"glyphs": 16, "digits": 8}


@dataclasses.dataclass
class ImageData:
    """A labelled image set split into train and test parts.

    Attributes:
        x_train: `[n_train, size, size, 3]` float32 images in `[0, 1]`.
        y_train: `[n_train]` int32 labels.
        x_test: `[n_test, size, size, 3]` float32 images in `[0, 1]`.
        y_test: `[n_test]` int32 labels.
        class_names: Name of each label, indexed by label.
        source: Human-readable description of where the images came from.
        seen_classes: For a source made of seen and unseen classes (glyphs:
            Latin, then Greek and Cyrillic), the number of seen classes,
            labels `0 .. seen_classes - 1`; `None` for the others.
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    class_names: list[str]
    source: str
    seen_classes: int | None = None

    @property
    def image_size(self) -> int:
        """The images' height (and width)."""
        return int(self.x_train.shape[1])

    @property
    def num_classes(self) -> int:
        """The number of classes."""
        return len(self.class_names)


def check_data_spec(spec: str) -> list[Path] | None:
    """Checks a data spec without decoding any image.

    Args:
        spec: `"glyphs"`, `"digits"`, a folder path, or `"tfds:NAME"`.

    Returns:
        For a folder, the image files found (sorted by class then name);
        `None` for the other sources.

    Raises:
        ValueError: If the folder does not exist, is not a folder, has no
            class sub-folders or no images, or if TFDS is requested and not
            installed.
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(
            f"--data must be 'glyphs', 'digits', a folder or 'tfds:NAME'; got {spec!r}."
        )
    if spec in EMBEDDED_SOURCES:
        return None
    if spec.startswith(TFDS_PREFIX):
        name = spec[len(TFDS_PREFIX) :]
        if not name:
            raise ValueError("--data tfds:NAME needs a dataset name, e.g. tfds:cifar10.")
        try:
            import tensorflow_datasets  # noqa: F401
        except ImportError as error:
            raise ValueError(
                f"--data {spec} needs TensorFlow Datasets: pip install tensorflow-datasets "
                f"({error})."
            ) from None
        return None
    return image_files(Path(spec))


def load_data(
    spec: str = "glyphs",
    image_size: int = 32,
    seed: int = 0,
    test_fraction: float = 0.2,
    limit: int | None = None,
) -> ImageData:
    """Loads a labelled image set, resized to squares and split into train and test.

    Images are converted to RGB (greyscale repeated), resized with bilinear
    interpolation (antialiased when shrinking) and scaled to `[0, 1]`. The
    split is stratified: in each class, `round(test_fraction * n)` images (at
    least one when the class has two or more) go to the test part, chosen
    with `seed`.

    Args:
        spec: `"glyphs"` (default), `"digits"`, a folder with one sub-folder
            per class, or `"tfds:NAME"`.
        image_size: Side of the square output images. Defaults to `32`.
        seed: Seed of the subset and split. Defaults to `0`.
        test_fraction: Fraction of each class held out for testing, in
            `(0, 1)`. Defaults to `0.2`.
        limit: Keep at most this many images (a random subset, drawn with
            `seed` before the split), for quick runs. Defaults to `None` (all).

    Returns:
        An `ImageData`.

    Raises:
        ValueError: For a bad argument, a missing or empty folder, an image
            that cannot be decoded (named in the message), a TFDS dataset that
            cannot be loaded, or too few images to split.
        ImportError: For glyphs without matplotlib (its fonts).

    Example:

    >>> from tensorflow_similarity.datasets import load_data
    >>> data = load_data("digits", image_size=16, seed=0)
    >>> data.x_train.shape, data.x_test.shape
    ((1438, 16, 16, 3), (359, 16, 16, 3))
    """
    if not is_int(image_size) or image_size < 1:
        raise ValueError(f"image_size must be a positive integer; got {image_size!r}.")
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1); got {test_fraction!r}.")
    if limit is not None and (not is_int(limit) or limit < 2):
        raise ValueError(f"limit must be an integer of at least 2, or None; got {limit!r}.")
    files = check_data_spec(spec)
    rng = np.random.default_rng(seed)
    seen_classes = None
    if spec == "glyphs":
        glyphs = load_glyphs(max(image_size, 8))
        images = np.repeat(glyphs.images[..., None], 3, axis=-1)
        labels, class_names = glyphs.labels, glyphs.class_names
        seen_classes = glyphs.num_seen_classes
        source = (
            f"glyphs ({len(labels):,} characters drawn in matplotlib's fonts, "
            f"{glyphs.num_seen_classes} Latin classes then "
            f"{glyphs.num_classes - glyphs.num_seen_classes} Greek and Cyrillic)"
        )
    elif spec == "digits":
        images, labels, class_names, source = load_digits_images()
    elif spec.startswith(TFDS_PREFIX):
        images, labels, class_names, source = load_tfds_images(spec[len(TFDS_PREFIX) :], limit)
    else:
        files = subset_files(files, limit, rng)
        images, labels, class_names = decode_files(files, image_size)
        source = f"image folder {spec} ({len(class_names)} classes)"
        limit = None
    if limit is not None and limit < len(labels):
        keep = np.sort(rng.choice(len(labels), size=limit, replace=False))
        images, labels = images[keep], labels[keep]
    images = resize_images(images, image_size)
    train, test = _stratified_split(labels, test_fraction, rng)
    if len(train) == 0 or len(test) == 0:
        raise ValueError(
            f"{source}: {len(labels)} images are too few to split into train and test; "
            "use at least one class with two or more images."
        )
    return ImageData(
        x_train=images[train],
        y_train=labels[train],
        x_test=images[test],
        y_test=labels[test],
        class_names=class_names,
        source=source,
        seen_classes=seen_classes,
    )


def _stratified_split(
    labels: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    train, test = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        n_test = int(round(test_fraction * len(members)))
        if len(members) >= 2:
            n_test = min(max(n_test, 1), len(members) - 1)
        else:
            n_test = 0
        test.extend(members[:n_test])
        train.extend(members[n_test:])
    return np.sort(np.array(train, np.int64)), np.sort(np.array(test, np.int64))
