"""A folder of labelled images: one sub-folder per class, each holding image files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np

from tensorflow_similarity.datasets._resize import resize_images
from tensorflow_similarity.datasets.image_header import MAX_IMAGE_PIXELS, check_image_pixels

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".bmp")


def image_files(folder: Path) -> list[Path]:
    """The image files of `folder`'s class sub-folders, sorted by class then name.

    An image is a file whose name ends in one of `IMAGE_EXTENSIONS` and does
    not start with a dot; a link to one counts as one. Anything else under
    such a name (a link to a missing file, a FIFO, a socket, a folder) is
    refused, naming it, rather than skipped: a FIFO would block its reader,
    and a skipped image would leave its class a smaller training set than
    the folder shows.

    Raises:
        ValueError: If the folder does not exist, is a file, holds no
            images, or holds entries named as images that are not files.
    """
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
    named = [
        path
        for class_dir in class_dirs
        for path in sorted(class_dir.iterdir())
        if not path.name.startswith(".") and path.suffix.lower() in IMAGE_EXTENSIONS
    ]
    files, refused = [], []
    for path in named:
        what = not_a_file(path)
        if what is None:
            files.append(path)
        else:
            refused.append(f"{str(path.relative_to(folder))!r} ({what})")
    if refused:
        one = len(refused) == 1
        more = f" and {len(refused) - 5} more" if len(refused) > 5 else ""
        raise ValueError(
            f"--data folder {str(folder)!r} holds {len(refused)} "
            f"{'entry' if one else 'entries'} named as {'an image' if one else 'images'} but "
            f"not {'a file' if one else 'files'}: {', '.join(refused[:5])}{more}. Replace or "
            f"remove {'it' if one else 'them'} (or fix the links), so that every image named "
            "is read."
        )
    if not files:
        found = "no class sub-folders" if not class_dirs else "sub-folders without image files"
        raise ValueError(
            f"--data folder {str(folder)!r} holds no images ({found}). It needs one sub-folder "
            f"per class holding {', '.join(IMAGE_EXTENSIONS)} files, e.g. "
            f"{os.path.join(str(folder), 'cats', '001.jpg')}."
        )
    return files


def not_a_file(path: Path) -> str | None:
    """What `path` is if not a regular file (after links), without opening it; else `None`.

    Returns:
        `None` for a file (or a link to one), else words such as `"a FIFO"`
        or `"a link to a missing file"`.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "a link to a missing file" if path.is_symlink() else "deleted while listed"
    except OSError as error:
        return f"cannot be read: {error.strerror or error}"
    if stat.S_ISREG(mode):
        return None
    kinds = {stat.S_ISDIR: "a folder", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
    return next((kind for test, kind in kinds.items() if test(mode)), "a device, not a file")


def subset_files(files: list[Path], limit: int | None, rng: np.random.Generator) -> list[Path]:
    """`files`, or a sorted random subset of `limit` of them drawn with `rng`."""
    if limit is None or limit >= len(files):
        return files
    keep = np.sort(rng.choice(len(files), size=limit, replace=False))
    return [files[i] for i in keep]


def read_image(
    path: Path, image_size: int, max_pixels: int | None = MAX_IMAGE_PIXELS
) -> np.ndarray:
    """Reads one image file as `load_data` reads a folder's: RGB, resized, in `[0, 1]`.

    An image whose header declares more than `max_pixels` pixels is refused
    before it is decoded (a decompression bomb: a small file that decodes
    to gigabytes), as Pillow's `Image.MAX_IMAGE_PIXELS` guard refuses it.

    Args:
        path: A PNG, JPEG, GIF or BMP file.
        image_size: Side of the square output image.
        max_pixels: The most pixels (width times height) read, or `None` for
            no limit. Defaults to Pillow's default limit, 89,478,485.

    Returns:
        A `[image_size, image_size, 3]` float32 array.

    Raises:
        ValueError: If the file cannot be read or decoded, or has more than
            `max_pixels` pixels (named in the message).
    """
    import tensorflow as tf

    check_image_pixels(path, max_pixels)
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
    return resize_images(image.numpy()[None], image_size)[0]


def decode_files(files: list[Path], image_size: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The images of `files`, their labels (by sorted class folder name) and class names."""
    class_names = sorted({path.parent.name for path in files})
    index = {name: i for i, name in enumerate(class_names)}
    images = np.empty((len(files), image_size, image_size, 3), np.float32)
    for i, path in enumerate(files):
        images[i] = read_image(path, image_size)
    labels = np.array([index[path.parent.name] for path in files], np.int32)
    return images, labels, class_names
