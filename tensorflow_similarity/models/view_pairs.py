"""The two views of a `ContrastiveModel` batch: packed for `fit`, unpacked in the step."""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def pack_view_pairs(x: Any) -> Any:
    """Maps a `tf.data.Dataset` of `(view1, view2)` pairs to `[batch, 2, ...]` tensors.

    Keras 3's `fit` under `MultiWorkerMirroredStrategy` cannot take a tuple
    of distributed values (keras-team/keras#20585), while a single tensor
    works under every strategy. Anything else is returned as is.
    """
    if not isinstance(x, tf.data.Dataset):
        return x
    spec = x.element_spec
    if (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(isinstance(s, tf.TensorSpec) for s in spec)
        and spec[0].shape.rank == spec[1].shape.rank
    ):
        return x.map(lambda a, b: tf.stack([a, b], axis=1))
    return x


def is_stacked_pair(data: Any, image_rank: int | None) -> bool:
    """Whether `data` is a `[batch, 2, ...]` tensor of view pairs of images of `image_rank`."""
    return (
        image_rank is not None
        and hasattr(data, "shape")
        and len(data.shape) == image_rank + 1
        and data.shape[1] == 2
    )


def split_views(data: Any, image_rank: int | None, augmenter: Any) -> tuple[Any, Any]:
    """Returns the batch's `(view1, view2)`: stacked, a pair, or `augmenter(images)`.

    Raises:
        ValueError: For a tuple of other than two elements, or plain images
            without an `augmenter`.
    """
    while isinstance(data, (tuple, list)) and len(data) == 1:
        data = data[0]
    if is_stacked_pair(data, image_rank):
        return data[:, 0], data[:, 1]
    if isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise ValueError(
                "ContrastiveModel expects batches of (view1, view2) pairs or of images "
                f"with an augmenter; got a tuple of {len(data)} elements."
            )
        return data[0], data[1]
    if augmenter is None:
        raise ValueError(
            "ContrastiveModel received plain images but has no augmenter. Pass "
            "augmenter=... (e.g. tensorflow_similarity.augmenters) or feed "
            "(view1, view2) pairs."
        )
    return augmenter(data)
