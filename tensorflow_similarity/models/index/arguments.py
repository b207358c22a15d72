"""The checks and conversions of the index API's arguments, made before anything is predicted.

`keras_rank_adjusted` fits a batch to the model's input rank as Keras
does, `check_length` checks that labels or data have one item per
example, and `canonical_distance` resolves `compile`'s `distance`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorflow_similarity.distances import Distance, distance_canonicalizer


def keras_rank_adjusted(x: np.ndarray, expected: tuple[int | None, ...]) -> np.ndarray:
    """Returns `x` with the one rank change a Functional Keras model makes to its input.

    Keras' `fit` and `predict` add a missing trailing axis of size 1 (MNIST's
    `(n, 28, 28)` for a `(28, 28, 1)` input, as 0.17's notebooks pass) and
    drop an extra one (`(n, 28, 28, 1, 1)`); nothing else. The index API
    accepts the same batches, so what trains also indexes.

    Args:
        x: A batch of examples.
        expected: The model's input shape, without the batch axis.
    """
    if x.ndim == len(expected) and expected and expected[-1] == 1:
        return x[..., np.newaxis]
    if x.ndim == len(expected) + 2 and x.shape[-1] == 1:
        return x[..., 0]
    return x


def check_length(name: str, values: Any, num: int, required: bool = False) -> None:
    """Raises unless `values` has `num` items (or is `None` and not `required`)."""
    if values is None:
        if required:
            raise ValueError(f"{name} is required: pass one label per example.")
        return
    length = len(values) if hasattr(values, "__len__") else None
    if length != num:
        raise ValueError(f"Got {length} items in {name} for {num} examples. Pass one per example.")


def canonical_distance(distance: Distance | str, loss: Any) -> Distance:
    """Returns `distance` as a `Distance`; `"auto"` takes the loss's (0.17's default).

    Raises:
        ValueError: For `"auto"` with a loss that has no `distance`.
    """
    if isinstance(distance, str) and distance == "auto":
        first = loss[0] if isinstance(loss, (list, tuple)) and loss else loss
        found = getattr(first, "distance", None)
        if found is None:
            raise ValueError(
                "distance='auto' takes the distance of the loss, but the loss "
                f"{first!r} has none. Pass distance='cosine' (or another name)."
            )
        return distance_canonicalizer(found)
    return distance_canonicalizer(distance)
