"""Pair masks and the positive / negative mining of the metric losses.

Every function takes a `[n, m]` matrix of distances from `n` anchors (the
queries) to `m` keys whose first `n` rows are the anchors themselves, so an
anchor is never its own positive. Rows whose mask is empty get a finite
placeholder (0) and `found=False`; the losses drop those anchors, and no
NaN or infinity reaches a gradient.
"""

from __future__ import annotations

import tensorflow as tf

POSITIVE_STRATEGIES = ("hard", "easy")
NEGATIVE_STRATEGIES = ("semi-hard", "hard", "easy")


def pair_masks(query_labels: tf.Tensor, key_labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Returns the `[n, m]` boolean masks of positive and negative pairs.

    Args:
        query_labels: `[n]` integer labels of the anchors.
        key_labels: `[m]` integer labels of the keys, whose first `n` rows
            are the anchors.

    Returns:
        `(positive, negative)`: same label excluding each anchor itself, and
        different label.
    """
    same = tf.equal(query_labels[:, tf.newaxis], key_labels[tf.newaxis, :])
    n, m = tf.shape(query_labels)[0], tf.shape(key_labels)[0]
    itself = tf.equal(tf.range(n)[:, tf.newaxis], tf.range(m)[tf.newaxis, :])
    return tf.logical_and(same, tf.logical_not(itself)), tf.logical_not(same)


def masked_max(values: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Returns each row's largest masked value, its column and whether there is one.

    Args:
        values: `[n, m]` float tensor.
        mask: `[n, m]` boolean tensor.

    Returns:
        `(value [n], column [n] int32, found [n] bool)`; `value` is 0 and
        `column` 0 in rows with an empty mask.
    """
    found = tf.reduce_any(mask, axis=1)
    lowest = tf.fill(tf.shape(values), tf.constant(values.dtype.min, values.dtype))
    candidates = tf.where(mask, values, lowest)
    column = tf.argmax(candidates, axis=1, output_type=tf.int32)
    value = tf.gather(values, column, axis=1, batch_dims=1)
    return tf.where(found, value, tf.zeros_like(value)), column, found


def masked_min(values: tf.Tensor, mask: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Returns each row's smallest masked value, its column and whether there is one.

    Args:
        values: `[n, m]` float tensor.
        mask: `[n, m]` boolean tensor.

    Returns:
        `(value [n], column [n] int32, found [n] bool)`; `value` is 0 and
        `column` 0 in rows with an empty mask.
    """
    negated, column, found = masked_max(-values, mask)
    return -negated, column, found


def mine_positives(
    distances: tf.Tensor, positive_mask: tf.Tensor, strategy: str
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Picks one positive per anchor.

    Args:
        distances: `[n, m]` anchor-to-key distances.
        positive_mask: `[n, m]` positive pairs.
        strategy: `"hard"` (the farthest positive) or `"easy"` (the closest).

    Returns:
        `(distance [n], column [n], found [n])` as `masked_max`.
    """
    if strategy == "hard":
        return masked_max(distances, positive_mask)
    if strategy == "easy":
        return masked_min(distances, positive_mask)
    raise ValueError(
        f"positive mining strategy must be one of {POSITIVE_STRATEGIES}, got {strategy!r}."
    )


def mine_negatives(
    distances: tf.Tensor, positive_mask: tf.Tensor, negative_mask: tf.Tensor, strategy: str
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Picks one negative per anchor.

    Args:
        distances: `[n, m]` anchor-to-key distances.
        positive_mask: `[n, m]` positive pairs (semi-hard mining needs them).
        negative_mask: `[n, m]` negative pairs.
        strategy: `"hard"` (the closest negative), `"easy"` (the farthest) or
            `"semi-hard"`: the closest negative farther than the anchor's
            farthest positive, or the farthest negative when none is (0.17's
            definition; the hardest positive is used whatever the positive
            strategy). An anchor without positives gets its closest negative.

    Returns:
        `(distance [n], column [n], found [n])` as `masked_min`.
    """
    if strategy == "hard":
        return masked_min(distances, negative_mask)
    if strategy == "easy":
        return masked_max(distances, negative_mask)
    if strategy == "semi-hard":
        hardest_positive, _, _ = masked_max(distances, positive_mask)
        return semi_hard_negatives(distances, negative_mask, hardest_positive)
    raise ValueError(
        f"negative mining strategy must be one of {NEGATIVE_STRATEGIES}, got {strategy!r}."
    )


def masked_logsumexp(values: tf.Tensor, mask: tf.Tensor, plus_one: bool = False) -> tf.Tensor:
    """Returns each row's `log(sum_mask exp(values))`, or `log(1 + ...)`.

    Args:
        values: `[n, m]` float tensor.
        mask: `[n, m]` boolean tensor.
        plus_one: Whether to add `exp(0)` inside the log (a softplus of the
            log-sum-exp, as in multi-similarity's terms).

    Returns:
        `[n]` values, computed stably; a row with an empty mask gives 0
        (which is `log(1 + 0)` with `plus_one`; without it the caller drops
        that row).
    """
    lowest = tf.constant(values.dtype.min, values.dtype)
    candidates = tf.where(mask, values, tf.fill(tf.shape(values), lowest))
    shift = tf.reduce_max(candidates, axis=1, keepdims=True)
    if plus_one:
        shift = tf.maximum(shift, 0.0)
    shift = tf.stop_gradient(
        tf.where(tf.reduce_any(mask, axis=1, keepdims=True), shift, 0.0 * shift)
    )
    terms = tf.where(mask, tf.exp(tf.where(mask, values, shift) - shift), tf.zeros_like(values))
    total = tf.reduce_sum(terms, axis=1)
    shift = shift[:, 0]
    if plus_one:
        return tf.math.log(tf.exp(-shift) + total) + shift
    found = tf.reduce_any(mask, axis=1)
    safe = tf.where(found, total, tf.ones_like(total))
    return tf.where(found, tf.math.log(safe) + shift, tf.zeros_like(total))


def semi_hard_negatives(
    distances: tf.Tensor, negative_mask: tf.Tensor, threshold: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Picks each anchor's closest negative farther than `threshold`, else its farthest.

    `mine_negatives(..., "semi-hard")` passes each anchor's farthest positive
    (0 without one); 0.17's `losses.utils.negative_distances` its own.

    Args:
        distances: `[n, m]` anchor-to-key distances.
        negative_mask: `[n, m]` negative pairs.
        threshold: `[n]` distances, in the dtype of `distances`.

    Returns:
        `(distance [n], column [n], found [n])` as `masked_min`; `found` is
        False only in rows without a negative.
    """
    farther = tf.logical_and(negative_mask, distances > threshold[:, tf.newaxis])
    semi_hard = masked_min(distances, farther)
    easy = masked_max(distances, negative_mask)
    return tuple(tf.where(semi_hard[2], s, e) for s, e in zip(semi_hard, easy, strict=True))
