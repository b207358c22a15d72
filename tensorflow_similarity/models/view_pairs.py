"""The two views of a `ContrastiveModel` batch: packed for `fit`, unpacked in the step."""

from __future__ import annotations

from typing import Any

import tensorflow as tf


def pack_view_pairs(x: Any, image_rank: int | None = None) -> Any:
    """Maps a `tf.data.Dataset` of `(view1, view2)` pairs to `[batch, 2, ...]` tensors.

    Keras 3's `fit` under `MultiWorkerMirroredStrategy` cannot take a tuple
    of distributed values (keras-team/keras#20585), while a single tensor
    works under every strategy. A multi-crop pair `(global_views,
    local_views)`, whose elements have one more axis than images of
    `image_rank`, and anything else are returned as they are.
    """
    if not isinstance(x, tf.data.Dataset):
        return x
    spec = x.element_spec
    if (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(isinstance(s, tf.TensorSpec) for s in spec)
        and spec[0].shape.rank == spec[1].shape.rank
        and (image_rank is None or spec[0].shape.rank == image_rank)
    ):
        return x.map(lambda a, b: tf.stack([a, b], axis=1))
    return x


def split_crops(data: Any, image_rank: int | None, augmenter: Any) -> tuple[Any, Any, Any]:
    """Returns the batch's `(view1, view2, local_views)`; `local_views` is `None` without.

    A batch is a pair of views (see `split_views`), or a multi-crop pair
    `(global_views, local_views)`: `[batch, 2, ...]` global crops and
    `[batch, n, ...]` local crops, as given or as `augmenter(images)` makes
    them. `n = 0` local crops is a pair of views.
    """
    while isinstance(data, (tuple, list)) and len(data) == 1:
        data = data[0]
    if not (isinstance(data, (tuple, list)) or is_stacked_pair(data, image_rank)):
        if augmenter is None:
            split_views(data, image_rank, augmenter)  # Raises its error.
        data = augmenter(data)
    if (
        isinstance(data, (tuple, list))
        and len(data) == 2
        and is_stacked_pair(data[0], image_rank)
        and image_rank is not None
        and len(data[1].shape) == image_rank + 1
    ):
        global_views, local_views = data
        if local_views.shape[1] == 0:
            local_views = None
        else:
            _check_local_crops(global_views, local_views)
        return global_views[:, 0], global_views[:, 1], local_views
    view1, view2 = split_views(data, image_rank, None)
    return view1, view2, None


def _check_local_crops(global_views: Any, local_views: Any) -> None:
    """Refuses local crops that are not images of the global crops' kind, or larger than them."""
    glob, local = list(global_views.shape[2:]), list(local_views.shape[2:])
    known = all(d is not None for d in glob[:-1] + local[:-1])
    if glob[-1] != local[-1] or (known and any(a > b for a, b in zip(local, glob, strict=True))):
        raise ValueError(
            f"Multi-crop batches hold local crops of shape {tuple(local)} beside global crops of "
            f"shape {tuple(glob)}: local crops are smaller views of the same images (DINO's 96 "
            "pixels beside 224), with as many channels. Make them with "
            "augmenters.multicrop_augmenter, local_size below global_size."
        )


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
