"""tensorflow-similarity 0.17's mining helpers, for loss functions written against them.

The package's losses mine with `losses.mining`; these keep 0.17's names,
signatures and `[n, 1]` return values (over `algebra`'s masked reductions),
so that a 0.17 loss function wrapped in `MetricLoss(fn)` runs unchanged.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tensorflow_similarity.algebra import masked_max, masked_min

__all__ = [
    "compute_loss",
    "logsumexp",
    "negative_distances",
    "positive_distances",
    "semi_hard_easy_mask",
]


def positive_distances(
    positive_mining_strategy: str, distances: Any, positive_mask: Any
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns each anchor's mined positive distance `[n, 1]` and its column `[n]`.

    Args:
        positive_mining_strategy: `"hard"` (the farthest positive) or
            `"easy"` (the closest).
        distances: `[n, m]` anchor-to-key distances.
        positive_mask: `[n, m]` positive pairs.

    Raises:
        ValueError: For another strategy.
    """
    if positive_mining_strategy == "hard":
        return masked_max(distances, positive_mask)
    if positive_mining_strategy == "easy":
        return masked_min(distances, positive_mask)
    raise ValueError(
        f"positive_mining_strategy must be 'hard' or 'easy'; got {positive_mining_strategy!r}."
    )


def negative_distances(
    negative_mining_strategy: str, distances: Any, negative_mask: Any, positive_mask: Any
) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns each anchor's mined negative distance `[n, 1]` and its column `[n]`.

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
    if negative_mining_strategy == "hard":
        return masked_min(distances, negative_mask)
    if negative_mining_strategy == "easy":
        return masked_max(distances, negative_mask)
    if negative_mining_strategy == "semi-hard":
        farthest_positive, _ = masked_max(distances, positive_mask)
        farther = tf.greater(distances, farthest_positive)
        _, farthest_negative = masked_max(distances, negative_mask)
        fallback = semi_hard_easy_mask(distances, farthest_negative)
        candidates = tf.where(farther, tf.cast(negative_mask, tf.bool), fallback)
        return masked_min(distances, candidates)
    raise ValueError(
        "negative_mining_strategy must be 'hard', 'semi-hard' or 'easy'; got "
        f"{negative_mining_strategy!r}."
    )


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
