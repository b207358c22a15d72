"""tensorflow-similarity 0.17's masked reductions and pair masks, for losses written against it.

The package's own losses mine with `losses.mining`, which flags the rows
that have no pair; these functions keep 0.17's signatures and return values
(a `[n, 1]` value and an int64 index per row) so that 0.17 code runs
unchanged.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["build_masks", "masked_max", "masked_min"]

# What 0.17 returned for a row with an empty mask: the row's extreme value
# moved away from every distance by this much.
_EMPTY_ROW_OFFSET = 1e-6


def _masked_extreme(
    distances: Any, mask: Any, dim: int, largest: bool
) -> tuple[tf.Tensor, tf.Tensor]:
    distances = tf.convert_to_tensor(distances)
    dtype = distances.dtype
    # float64, as 0.17, so that the empty-row offset is not lost to rounding.
    wide = tf.cast(distances, tf.float64)
    selected = tf.cast(mask, tf.bool)
    if largest:
        fill = tf.reduce_min(wide, dim, keepdims=True) - _EMPTY_ROW_OFFSET
        candidates = tf.where(selected, wide, fill)
        value, index = tf.reduce_max(candidates, dim, keepdims=True), tf.argmax(candidates, dim)
    else:
        fill = tf.reduce_max(wide, dim, keepdims=True) + _EMPTY_ROW_OFFSET
        candidates = tf.where(selected, wide, fill)
        value, index = tf.reduce_min(candidates, dim, keepdims=True), tf.argmin(candidates, dim)
    return tf.cast(value, dtype), index


def masked_max(distances: Any, mask: Any, dim: int = 1) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns each row's largest distance among the masked ones, and its index.

    Args:
        distances: `[n, m]` float distances.
        mask: `[n, m]` boolean (or 0/1) mask of the entries to consider.
        dim: The axis reduced. Defaults to 1.

    Returns:
        `(values, indices)`: `values` of shape `[n, 1]` (the reduced axis
        kept) in the distances' dtype, `indices` int64 of shape `[n]`, the
        first such entry. A row with an empty mask gives its smallest
        distance minus `1e-6` and index 0, as in 0.17.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.algebra import masked_max
    >>> d = np.array([[0.0, 0.5, 0.9], [0.3, 0.1, 0.2]])
    >>> m = np.array([[True, True, False], [False, False, True]])
    >>> values, indices = masked_max(d, m)
    >>> values.numpy().ravel().tolist(), indices.numpy().tolist()
    ([0.5, 0.2], [1, 2])
    """
    return _masked_extreme(distances, mask, dim, largest=True)


def masked_min(distances: Any, mask: Any, dim: int = 1) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns each row's smallest distance among the masked ones, and its index.

    Args:
        distances: `[n, m]` float distances.
        mask: `[n, m]` boolean (or 0/1) mask of the entries to consider.
        dim: The axis reduced. Defaults to 1.

    Returns:
        `(values, indices)` as `masked_max`; a row with an empty mask gives
        its largest distance plus `1e-6` and index 0, as in 0.17.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.algebra import masked_min
    >>> d = np.array([[0.0, 0.5, 0.9], [0.3, 0.1, 0.2]])
    >>> m = np.array([[False, True, True], [True, False, True]])
    >>> values, indices = masked_min(d, m)
    >>> values.numpy().ravel().tolist(), indices.numpy().tolist()
    ([0.5, 0.2], [1, 2])
    """
    return _masked_extreme(distances, mask, dim, largest=False)


def build_masks(
    query_labels: Any, key_labels: Any, batch_size: Any, remove_diagonal: bool = True
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns the `[n, m]` masks of the same-class and the other-class pairs.

    Args:
        query_labels: `[n]` or `[n, 1]` integer labels of the queries.
        key_labels: `[m]` or `[m, 1]` integer labels of the keys, whose first
            rows are the queries when `remove_diagonal` is set.
        batch_size: The length of the diagonal, `min(n, m)` (0.17's
            argument; the masks' shapes already fix it).
        remove_diagonal: Leave the pairs `(i, i)` (each query with itself)
            out of the positive mask. Defaults to `True`.

    Returns:
        `(positive_mask, negative_mask)`, boolean.

    Example:

    >>> from tensorflow_similarity.algebra import build_masks
    >>> pos, neg = build_masks([0, 0, 1], [0, 0, 1], batch_size=3)
    >>> pos.numpy().astype(int).tolist()
    [[0, 1, 0], [1, 0, 0], [0, 0, 0]]
    """
    queries = tf.reshape(tf.convert_to_tensor(query_labels), [-1, 1])
    keys = tf.reshape(tf.convert_to_tensor(key_labels), [1, -1])
    positive = tf.equal(queries, tf.cast(keys, queries.dtype))
    negative = tf.logical_not(positive)
    if remove_diagonal:
        rows, columns = tf.shape(queries)[0], tf.shape(keys)[1]
        itself = tf.equal(tf.range(rows)[:, tf.newaxis], tf.range(columns)[tf.newaxis, :])
        positive = tf.logical_and(positive, tf.logical_not(itself))
    return positive, negative
