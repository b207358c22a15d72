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
import os
from pathlib import Path

import numpy as np

from tensorflow_similarity._validation import is_int
from tensorflow_similarity.datasets import load_glyphs

# The embedded sources, and the image side each is shown at by default: the digits' own 8x8,
# and glyphs at a side where letters stay legible and a ResNet-18 trains in minutes on CPUs.
EMBEDDED_SOURCES = {"glyphs": 16, "digits": 8}
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
TFDS_PREFIX = "tfds:"


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
    return _image_files(Path(spec))


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
        images, labels, class_names, source = _digits()
    elif spec.startswith(TFDS_PREFIX):
        images, labels, class_names, source = _tfds(spec[len(TFDS_PREFIX) :], limit)
    else:
        files = _subset(files, limit, rng)
        images, labels, class_names = _decode_files(files, image_size)
        source = f"image folder {spec} ({len(class_names)} classes)"
        limit = None
    if limit is not None and limit < len(labels):
        keep = np.sort(rng.choice(len(labels), size=limit, replace=False))
        images, labels = images[keep], labels[keep]
    images = _resize(images, image_size)
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


def _image_files(folder: Path) -> list[Path]:
    if not folder.exists():
        raise ValueError(
            f"--data folder {str(folder)!r} does not exist. Give a folder with one sub-folder "
            "of images per class, 'digits', or 'tfds:NAME'."
        )
    if not folder.is_dir():
        raise ValueError(
            f"--data {str(folder)!r} is a file, not a folder. Give a folder with one "
            "sub-folder of images per class."
        )
    class_dirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    files = [
        path
        for class_dir in class_dirs
        for path in sorted(class_dir.iterdir())
        if path.is_file()
        and not path.name.startswith(".")
        and path.suffix.lower() in IMAGE_EXTENSIONS
    ]
    if not files:
        found = "no class sub-folders" if not class_dirs else "sub-folders without image files"
        raise ValueError(
            f"--data folder {str(folder)!r} holds no images ({found}). It needs one sub-folder "
            f"per class holding {', '.join(IMAGE_EXTENSIONS)} files, e.g. "
            f"{os.path.join(str(folder), 'cats', '001.jpg')}."
        )
    return files


def _subset(files: list[Path], limit: int | None, rng: np.random.Generator) -> list[Path]:
    if limit is None or limit >= len(files):
        return files
    keep = np.sort(rng.choice(len(files), size=limit, replace=False))
    return [files[i] for i in keep]


def read_image(path: Path, image_size: int) -> np.ndarray:
    """Reads one image file as `load_data` reads a folder's: RGB, resized, in `[0, 1]`.

    Args:
        path: A PNG, JPEG, GIF or BMP file.
        image_size: Side of the square output image.

    Returns:
        A `[image_size, image_size, 3]` float32 array.

    Raises:
        ValueError: If the file cannot be read or decoded (named in the message).
    """
    import tensorflow as tf

    try:
        image = tf.io.decode_image(
            Path(path).read_bytes(), channels=3, expand_animations=False, dtype=tf.float32
        )
    except (tf.errors.OpError, OSError) as error:
        reason = getattr(error, "strerror", None) or getattr(error, "message", None)
        reason = reason or str(error)
        raise ValueError(
            f"cannot read image {str(path)!r}: {reason.splitlines()[0]}. Remove or replace "
            "the file (PNG, JPEG, GIF and BMP are supported)."
        ) from None
    return _resize(image.numpy()[None], image_size)[0]


def _decode_files(files: list[Path], image_size: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    class_names = sorted({path.parent.name for path in files})
    index = {name: i for i, name in enumerate(class_names)}
    images = np.empty((len(files), image_size, image_size, 3), np.float32)
    for i, path in enumerate(files):
        images[i] = read_image(path, image_size)
    labels = np.array([index[path.parent.name] for path in files], np.int32)
    return images, labels, class_names


def _digits() -> tuple[np.ndarray, np.ndarray, list[str], str]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    # Pixel values are counts 0..16 of the 4x4 blocks each 8x8 pixel summarises.
    images = (digits.images[..., None] / 16.0).astype(np.float32)
    images = np.repeat(images, 3, axis=-1)
    labels = digits.target.astype(np.int32)
    names = [str(c) for c in range(10)]
    return images, labels, names, "scikit-learn digits (1,797 8x8 images, 10 classes)"


def _tfds(name: str, limit: int | None) -> tuple[np.ndarray, np.ndarray, list[str], str]:
    import tensorflow as tf
    import tensorflow_datasets as tfds

    split = "train" if limit is None else f"train[:{limit}]"
    try:
        dataset, info = tfds.load(name, split=split, as_supervised=True, with_info=True)
    # TFDS raises many exception types (network, missing files, unknown name): all mean
    # "unavailable" here.
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise ValueError(
            f"cannot load TensorFlow Datasets {name!r} ({type(error).__name__}: {first_line}). "
            "Check the name, prepare it with `tfds build` where there is network access, "
            "or use a folder of images."
        ) from None
    images, labels = [], []
    for image, label in dataset:
        if image.shape.rank != 3:
            raise ValueError(f"TFDS {name!r} does not hold images ([h, w, c]): {image.shape}.")
        image = tf.image.convert_image_dtype(image, tf.float32)
        if image.shape[-1] == 1:
            image = tf.image.grayscale_to_rgb(image)
        images.append(image[..., :3].numpy())
        labels.append(int(label))
    if not images:
        raise ValueError(f"TFDS {name!r} has no training images.")
    label_feature = info.features["label"] if "label" in info.features else None
    names = getattr(label_feature, "names", None) or [str(c) for c in range(max(labels) + 1)]
    if len({image.shape for image in images}) > 1:
        # Varying sizes: resize one by one to the first image's size before stacking.
        height, width = images[0].shape[:2]
        images = [tf.image.resize(i, (height, width)).numpy() for i in images]
    return np.stack(images), np.array(labels, np.int32), list(names), f"TFDS {name}"


def _resize(images: np.ndarray, image_size: int) -> np.ndarray:
    if images.shape[1:3] == (image_size, image_size):
        return images.astype(np.float32)
    import tensorflow as tf

    resized = tf.image.resize(images, (image_size, image_size), antialias=True)
    return np.clip(resized.numpy(), 0.0, 1.0).astype(np.float32)


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
