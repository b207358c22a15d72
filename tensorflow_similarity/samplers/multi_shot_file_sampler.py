"""`MultiShotFileSampler`: class-balanced batches of images read from their files as drawn."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity.samplers.multi_shot_memory_sampler import MultiShotMemorySampler
from tensorflow_similarity.samplers.sampler import Augmenter


def load_image(path: str, target_size: tuple[int, int] | None = None) -> tf.Tensor:
    """Reads an image file into a float32 `[height, width, 3]` tensor with values in `[0, 1]`.

    JPEG, PNG, GIF (its first frame) and BMP files are read; greyscale
    images get three equal channels. With a `target_size` the image is
    resized with a Lanczos-3 filter and clipped back to `[0, 1]` (the filter
    overshoots at edges).

    Args:
        path: The image file.
        target_size: `(height, width)` to resize to, or `None` to keep the
            file's size. Defaults to `None`.

    Returns:
        The image.

    Example:

    >>> import os
    >>> import tempfile
    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.samplers import load_image
    >>> path = os.path.join(tempfile.mkdtemp(), "cat.png")
    >>> tf.io.write_file(path, tf.io.encode_png(np.zeros((32, 48, 3), np.uint8)))
    >>> image = load_image(path, target_size=(224, 224))
    >>> image.shape, image.dtype
    (TensorShape([224, 224, 3]), tf.float32)
    """
    encoded = tf.io.read_file(path)
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    image = tf.image.convert_image_dtype(image, tf.float32)
    if target_size:
        image = tf.image.resize(image, target_size, method=tf.image.ResizeMethod.LANCZOS3)
        image = tf.clip_by_value(image, 0.0, 1.0)
    return image


class MultiShotFileSampler(MultiShotMemorySampler):
    """A `MultiShotMemorySampler` over image files, each read when a batch draws it.

    Only the paths are held in memory; every batch reads its
    `classes_per_batch * examples_per_class_per_batch` images with
    `load_example_fn` (by default `load_image`, which keeps each file's size:
    give images of different sizes a `load_example_fn` that resizes, e.g.
    `functools.partial(load_image, target_size=(224, 224))`). The pool,
    the draws, seeding, warm-up and distribution are `MultiShotMemorySampler`'s:
    with the same `seed`, the batches are those of a `MultiShotMemorySampler`
    over the loaded images.

    Args:
        x: The image paths, one per example.
        y: Integer class ids, of shape `[n]` or `[n, 1]`.
        load_example_fn: A callable reading one path into an example.
            Defaults to `load_image`.
        classes_per_batch: Number of distinct classes in a batch. Defaults to 2.
        examples_per_class_per_batch: Number of examples of each class in a
            batch. Defaults to 2.
        steps_per_epoch: Number of batches per epoch. Defaults to 1000.
        class_list: The classes to sample from. Defaults to `None`: all.
        total_examples_per_class: The most examples of each class in the pool.
            Defaults to `None`: all of them.
        augmenter: `None` or a callable `(x, y, num_augmentations_per_example,
            is_warmup) -> (x, y)` applied to each batch. Defaults to `None`.
        warmup: Number of epochs during which the augmenter gets
            `is_warmup=True`. Defaults to -1: none.
        seed: Non-negative integer seed of the pool and the batches (keyword
            only). Defaults to `None`: a random one.
        allow_replacement: As in `MultiShotMemorySampler` (keyword only).
            Defaults to `True`.
        **kwargs: `keras.utils.PyDataset` options: `workers`,
            `use_multiprocessing`, `max_queue_size`.

    Raises:
        ValueError: For the reasons `MultiShotMemorySampler` gives; when a
            batch is drawn, if its images differ in shape.
        TypeError: If `load_example_fn` is not callable, or for the reasons
            `MultiShotMemorySampler` gives.

    Example:

    >>> import functools
    >>> import os
    >>> import tempfile
    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.samplers import MultiShotFileSampler, load_image
    >>> folder = tempfile.mkdtemp()
    >>> paths = [os.path.join(folder, f"{i}.png") for i in range(16)]
    >>> for i, path in enumerate(paths):
    ...     tf.io.write_file(path, tf.io.encode_png(np.full((8, 8, 3), i, np.uint8)))
    >>> labels = np.arange(16) % 4  # four classes of four images
    >>> sampler = MultiShotFileSampler(
    ...     paths, labels, functools.partial(load_image, target_size=(64, 64)),
    ...     classes_per_batch=2, examples_per_class_per_batch=4, seed=0,
    ... )
    >>> images, classes = sampler[0]  # 8 images, read from their files
    >>> images.shape
    TensorShape([8, 64, 64, 3])
    """

    def __init__(
        self,
        x: Sequence[str],
        y: Any,
        load_example_fn: Callable[[Any], Any] = load_image,
        classes_per_batch: int = 2,
        examples_per_class_per_batch: int = 2,
        steps_per_epoch: int = 1000,
        class_list: Sequence[int] | None = None,
        total_examples_per_class: int | None = None,
        augmenter: Augmenter | None = None,
        warmup: int = -1,
        *,
        seed: int | None = None,
        allow_replacement: bool = True,
        **kwargs: Any,
    ) -> None:
        if not callable(load_example_fn):
            raise TypeError(
                f"{type(self).__name__}: load_example_fn must be a callable reading one file, "
                f"such as load_image. Received {load_example_fn!r}."
            )
        super().__init__(
            x,
            y,
            load_example_fn=load_example_fn,
            classes_per_batch=classes_per_batch,
            examples_per_class_per_batch=examples_per_class_per_batch,
            steps_per_epoch=steps_per_epoch,
            class_list=class_list,
            total_examples_per_class=total_examples_per_class,
            augmenter=augmenter,
            warmup=warmup,
            seed=seed,
            allow_replacement=allow_replacement,
            **kwargs,
        )

    def _gather(self, indices: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        if len(indices) == 0:
            return super()._gather(indices)
        examples = [self.load_example_fn(self._x[i]) for i in indices]
        shapes = {tuple(np.shape(example)) for example in examples}
        if len(shapes) > 1:
            raise ValueError(
                f"{type(self).__name__}: the images of a batch differ in shape "
                f"({sorted(shapes)}), so they cannot be stacked. Resize them as they are read: "
                "load_example_fn=functools.partial(load_image, target_size=(height, width))."
            )
        return tf.stack(examples), tf.convert_to_tensor(self._y[indices])
