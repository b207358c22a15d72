"""tensorflow-similarity 0.17's masked reductions and pair masks, for losses written against it.

`masked_max` and `masked_min` are `losses.utils`' (adapters over
`losses.mining` that keep 0.17's `[n, 1]` values, int64 indices and
empty-row values); as in 0.17, one object under both paths.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tensorflow_similarity.losses.utils import masked_max, masked_min

__all__ = ["build_masks", "masked_max", "masked_min"]


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
