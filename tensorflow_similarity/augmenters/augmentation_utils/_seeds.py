"""The stateless seeds behind 0.17's augmentation functions, and their image batches."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

_INT32_MAX = 2**31 - 1


def stateless_seed(seed: Any = None) -> tf.Tensor:
    """Returns a `[2]` int32 seed for `tf.random.stateless_*`.

    Args:
        seed: `None` to draw one from TensorFlow's stateful generator (0.17's
            source of randomness: repeatable after `tf.random.set_seed`), an
            int, or a `[2]` integer tensor used as it is.
    """
    if seed is None:
        return tf.random.uniform([2], 0, _INT32_MAX, dtype=tf.int32)
    if isinstance(seed, int):
        return tf.constant([seed, 0], tf.int32)
    return tf.cast(tf.reshape(tf.convert_to_tensor(seed), [2]), tf.int32)


def sub_seed(seed: tf.Tensor, index: int) -> tf.Tensor:
    """Returns the `index`-th independent seed derived from `seed`."""
    return tf.random.experimental.stateless_fold_in(seed, index)


def as_batch(image: Any) -> tuple[tf.Tensor, bool]:
    """Returns `(images [b, h, w, c] float32, single)`, `single` if `image` was one image."""
    image = tf.convert_to_tensor(image)
    if image.dtype != tf.float32:
        image = tf.cast(image, tf.float32)
    if image.shape.rank == 3:
        return image[tf.newaxis], True
    if image.shape.rank == 4:
        return image, False
    raise ValueError(
        f"Expected one image [height, width, channels] or a batch [batch, height, width, "
        f"channels]; got a tensor of shape {image.shape}."
    )


def restore(images: tf.Tensor, single: bool) -> tf.Tensor:
    """Undoes `as_batch`'s batch axis for a single image."""
    return images[0] if single else images
