"""tensorflow-similarity 0.17's masked reductions and mining, for losses written against them.

These are adapters over `losses.mining`, the package's one implementation:
they keep 0.17's names, signatures, `[n, 1]` float values and int64 columns,
and 0.17's values for a row with nothing to pick, where `losses.mining`
returns 0 and `found=False`. So a 0.17 loss function wrapped in
`MetricLoss(fn)` runs unchanged. `algebra`, 0.17's other path, re-exports
`masked_max` and `masked_min`.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tensorflow_similarity.losses import mining

__all__ = [
    "compute_loss",
    "logsumexp",
    "masked_max",
    "masked_min",
    "negative_distances",
    "positive_distances",
    "semi_hard_easy_mask",
]

# What 0.17 returned for a row with an empty mask: the row's extreme value
# moved away from every distance by this much.
_EMPTY_ROW_OFFSET = 1e-6


def _as_017(
    dtype: tf.DType, wide: tf.Tensor, mined: tuple[tf.Tensor, tf.Tensor, tf.Tensor], largest: bool
) -> tuple[tf.Tensor, tf.Tensor]:
    """0.17's `(value [n], column [n] int64)` from `mining`'s result over float64 `[n, m]` rows.

    A row with nothing found takes 0.17's placeholder: its smallest distance
    minus 1e-6 after a masked max (`largest`), its largest plus 1e-6 after a
    masked min, and column 0. float64, as 0.17, so that the offset is not lost
    to rounding before the cast to `dtype`.
    """
    value, column, found = mined
    if largest:
        placeholder = tf.reduce_min(wide, axis=1) - _EMPTY_ROW_OFFSET
    else:
        placeholder = tf.reduce_max(wide, axis=1) + _EMPTY_ROW_OFFSET
    value = tf.where(found, value, placeholder)
    column = tf.where(found, column, tf.zeros_like(column))
    return tf.cast(value, dtype), tf.cast(column, tf.int64)


def _masked_extreme(
    distances: Any, mask: Any, dim: int, largest: bool
) -> tuple[tf.Tensor, tf.Tensor]:
    distances = tf.convert_to_tensor(distances)
    wide = tf.cast(distances, tf.float64)
    selected = tf.cast(mask, tf.bool)
    shape = tf.broadcast_dynamic_shape(tf.shape(wide), tf.shape(selected))
    wide, selected = tf.broadcast_to(wide, shape), tf.broadcast_to(selected, shape)
    # `mining` reduces the rows of a matrix: move `dim` last and flatten the others.
    rank = wide.shape.rank if wide.shape.rank is not None else 2
    dim %= rank
    order = [axis for axis in range(rank) if axis != dim] + [dim]
    wide, selected = tf.transpose(wide, order), tf.transpose(selected, order)
    kept = tf.shape(wide)[:-1]
    rows = tf.reshape(wide, [-1, tf.shape(wide)[-1]])
    rows_mask = tf.reshape(selected, tf.shape(rows))
    reduce = mining.masked_max if largest else mining.masked_min
    value, column = _as_017(distances.dtype, rows, reduce(rows, rows_mask), largest)
    return tf.expand_dims(tf.reshape(value, kept), dim), tf.reshape(column, kept)


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


def positive_distances(
    positive_mining_strategy: str, distances: Any, positive_mask: Any
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns each anchor's mined positive distance `[n, 1]` and its column `[n]`.

    `mining.mine_positives` with 0.17's values for an anchor without
    positives (as `masked_max` / `masked_min`).

    Args:
        positive_mining_strategy: `"hard"` (the farthest positive) or
            `"easy"` (the closest).
        distances: `[n, m]` anchor-to-key distances.
        positive_mask: `[n, m]` positive pairs.

    Raises:
        ValueError: For another strategy.
    """
    if positive_mining_strategy not in mining.POSITIVE_STRATEGIES:
        raise ValueError(
            f"positive_mining_strategy must be 'hard' or 'easy'; got {positive_mining_strategy!r}."
        )
    distances = tf.convert_to_tensor(distances)
    wide = tf.cast(distances, tf.float64)
    mined = mining.mine_positives(wide, tf.cast(positive_mask, tf.bool), positive_mining_strategy)
    value, column = _as_017(distances.dtype, wide, mined, positive_mining_strategy == "hard")
    return value[:, tf.newaxis], column


def negative_distances(
    negative_mining_strategy: str, distances: Any, negative_mask: Any, positive_mask: Any
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns each anchor's mined negative distance `[n, 1]` and its column `[n]`.

    `mining.mine_negatives` with 0.17's values for an anchor without
    negatives: as `masked_min` / `masked_max` for `"hard"` / `"easy"`; for
    `"semi-hard"`, column 0 at its distance when that is not beyond the
    farthest positive, else the row's largest distance plus `1e-6`. 0.17's
    semi-hard threshold for an anchor without positives is its smallest
    distance minus `1e-6` (so every negative is beyond it), not 0.

    Args:
        negative_mining_strategy: `"hard"` (the closest negative), `"easy"`
            (the farthest) or `"semi-hard"`: the closest negative farther
            than the farthest positive, else the farthest negative.
        distances: `[n, m]` anchor-to-key distances.
        negative_mask: `[n, m]` negative pairs.
        positive_mask: `[n, m]` positive pairs (for `"semi-hard"`).

    Raises:
        ValueError: For another strategy.
    """
    if negative_mining_strategy not in mining.NEGATIVE_STRATEGIES:
        raise ValueError(
            "negative_mining_strategy must be 'hard', 'semi-hard' or 'easy'; got "
            f"{negative_mining_strategy!r}."
        )
    distances = tf.convert_to_tensor(distances)
    wide = tf.cast(distances, tf.float64)
    negative = tf.cast(negative_mask, tf.bool)
    if negative_mining_strategy != "semi-hard":
        mined = mining.mine_negatives(wide, positive_mask, negative, negative_mining_strategy)
        value, column = _as_017(distances.dtype, wide, mined, negative_mining_strategy == "easy")
        return value[:, tf.newaxis], column
    farthest_positive, _ = positive_distances("hard", distances, positive_mask)
    threshold = tf.cast(farthest_positive[:, 0], tf.float64)
    value, column, found = mining.semi_hard_negatives(wide, negative, threshold)
    first = tf.logical_and(tf.logical_not(found), wide[:, 0] <= threshold)
    mined = (tf.where(first, wide[:, 0], value), column, tf.logical_or(found, first))
    value, column = _as_017(distances.dtype, wide, mined, largest=False)
    return value[:, tf.newaxis], column


def semi_hard_easy_mask(distances: Any, max_neg_idxs: Any) -> tf.Tensor:
    """Returns the `[n, m]` mask that selects, in row `i`, only column `max_neg_idxs[i]`.

    Semi-hard mining falls back on it (each anchor's farthest negative) where
    no negative is farther than the farthest positive.

    Args:
        distances: `[n, m]` distances (only their shape is used).
        max_neg_idxs: `[n]` integer columns.
    """
    columns = tf.shape(distances)[1]
    return tf.cast(tf.one_hot(tf.cast(max_neg_idxs, tf.int32), columns), tf.bool)


def compute_loss(positive_distances: Any, negative_distances: Any, margin: float | None) -> Any:
    """Returns the triplet terms: `softplus(d_ap - d_an)`, or the hinge with a margin.

    Args:
        positive_distances: `[n, 1]` mined positive distances.
        negative_distances: `[n, 1]` mined negative distances.
        margin: `None` for the soft margin `log(1 + exp(d_ap - d_an))`, else
            `max(d_ap - d_an + margin, 0)`.
    """
    gap = tf.subtract(positive_distances, negative_distances)
    if margin is None:
        return tf.nn.softplus(gap)
    return tf.nn.relu(gap + margin)


def logsumexp(pairwise_distances: Any, mask: Any) -> tf.Tensor:
    """Returns each row's `log(1 + sum_j mask_ij * exp(x_ij))`, `[n, 1]`, computed stably.

    The `1` inside the log (0.17's) keeps the result non-negative; a row
    with an empty mask gives 0.

    Args:
        pairwise_distances: `[n, m]` values `x`.
        mask: `[n, m]` weights, 1.0 for the entries to include and 0.0 for
            the others (booleans are accepted).
    """
    x = tf.convert_to_tensor(pairwise_distances)
    weights = tf.cast(mask, x.dtype)
    used = tf.not_equal(weights, 0.0)
    lowest = tf.fill(tf.shape(x), tf.constant(-float("inf"), x.dtype))
    # The shift is at least 0 because of the 1 inside the log.
    shift = tf.reduce_max(tf.where(used, x, lowest), axis=1, keepdims=True)
    shift = tf.where(tf.math.is_finite(shift), shift, tf.zeros_like(shift))
    shift = tf.stop_gradient(tf.maximum(shift, 0.0))
    terms = weights * tf.exp(tf.where(used, x - shift, lowest))
    return tf.math.log(tf.exp(-shift) + tf.reduce_sum(terms, axis=1, keepdims=True)) + shift
