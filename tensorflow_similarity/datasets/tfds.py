"""The `train` split of a TensorFlow Datasets dataset (`--data tfds:NAME`)."""

from __future__ import annotations

import numpy as np

TFDS_PREFIX = "tfds:"


def load_tfds_images(name: str, limit: int | None) -> tuple[np.ndarray, np.ndarray, list[str], str]:
    """The `train` split of TFDS dataset `name` (its first `limit` examples), in `[0, 1]` RGB.

    Returns the images (all of the first one's size), labels, class names and source.

    Raises:
        ValueError: If the dataset cannot be loaded or holds no images.
    """
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
