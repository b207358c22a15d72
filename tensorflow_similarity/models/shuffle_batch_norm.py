"""Shuffle batch norm: a key encoder run on a batch permuted across replicas (MoCo).

With batch norm computed per replica, a query and its positive key are
normalised with the same replica's batch statistics, which a contrastive
model can learn to recognise: the positive is then found by the statistics it
shares with the query, not by its content (He et al., "Momentum Contrast for
Unsupervised Visual Representation Learning", CVPR 2020, section 3.3). MoCo's
answer is to run the key encoder on the global batch permuted across the
replicas and to put its outputs back in the original order afterwards: a
key's statistics are then those of a random share of the global batch, mostly
other replicas' images. It costs two collectives per call of the key encoder
(an `all_gather` of the inputs, one of the outputs), where synchronised batch
norm costs one per batch-norm layer.

`BN_MODES` are the batch-norm modes of `ContrastiveModel` (`bn=`); this
module holds the permutation (`batch_shuffle_permutation`) and the shuffled
call (`shuffle_across_replicas`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tensorflow_similarity.collectives import gather_with_owner, sync_replica_context

__all__ = ["BN_MODES", "batch_shuffle_permutation", "shuffle_across_replicas"]

# `ContrastiveModel(bn=...)`: each replica's own statistics, the global batch's, or
# per-replica statistics with the key encoder's batch shuffled across replicas.
BN_MODES = ("per_replica", "sync", "shuffle")


def batch_shuffle_permutation(size: Any, step: Any, seed: int = 0) -> tf.Tensor:
    """The permutation of a global batch of `size` rows that shuffle batch norm uses at `step`.

    A function of `(size, step, seed)` alone (a stateless random draw), so
    every replica computes the same permutation without exchanging it, and a
    run (or a resumed one) draws the same permutations again.

    Args:
        size: Rows of the global batch (an int or a scalar tensor).
        step: The optimizer step (an int or a scalar tensor).
        seed: The seed of the run's permutations. Defaults to 0.

    Returns:
        An int32 tensor `[size]` holding a permutation of `0 .. size - 1`:
        shuffled row `p` is original row `permutation[p]`.

    Example:

    >>> import numpy as np
    >>> p = batch_shuffle_permutation(6, step=3, seed=1).numpy()
    >>> sorted(p.tolist())
    [0, 1, 2, 3, 4, 5]
    >>> bool(np.array_equal(p, batch_shuffle_permutation(6, 3, 1).numpy()))
    True
    """
    pair = tf.stack([tf.cast(seed, tf.int64), tf.cast(step, tf.int64)])
    keys = tf.random.stateless_uniform(tf.reshape(tf.cast(size, tf.int32), [1]), seed=pair)
    return tf.cast(tf.argsort(keys, stable=True), tf.int32)


def shuffle_across_replicas(
    fn: Callable[..., Any], tensors: tuple[tf.Tensor, ...], step: Any, seed: int = 0
) -> tuple[tf.Tensor, ...]:
    """Runs `fn` on a share of the global batch permuted across replicas; returns it restored.

    Every replica gathers the global batch of `tensors` (one `all_gather`),
    permutes it with `batch_shuffle_permutation(global_size, step, seed)`,
    and calls `fn` on the rows of the permuted batch at its own positions
    (as many as it holds), so that batch norm inside `fn` normalises a random
    share of the global batch. The outputs are gathered (one `all_gather`),
    put back in the original order, and each replica gets the outputs of its
    own rows: what `fn` would have given its rows had it seen that share. Two
    collectives in all (one per dtype among the inputs, then among the
    outputs), whatever the number of batch-norm layers in `fn`. Outside a
    replica context with more than one replica it is `fn(*tensors)`: a
    permutation of one device's batch leaves every batch statistic as it was.

    Args:
        fn: The network: takes the tensors, each `[rows, ...]`, and returns a
            tuple of tensors, each `[rows, ...]`, row for row.
        tensors: This replica's rows of each input.
        step: The optimizer step that seeds the permutation.
        seed: The run's seed of the permutations. Defaults to 0.

    Returns:
        `fn`'s outputs for this replica's rows, in their order.
    """
    tensors = tuple(map(tf.convert_to_tensor, tensors))
    if sync_replica_context() is None:
        return tuple(fn(*tensors))
    gathered, mine = gather_with_owner(*tensors)
    rows = tf.shape(tensors[0])[0]
    # Replicas hold consecutive rows of the global batch in replica order.
    start = tf.argmax(tf.cast(mine, tf.int32), output_type=tf.int32)
    permutation = batch_shuffle_permutation(tf.shape(mine)[0], step, seed)
    share = permutation[start : start + rows]
    outputs = tuple(fn(*(tf.gather(t, share) for t in gathered)))
    shuffled_outputs, _ = gather_with_owner(*outputs)
    original = tf.math.invert_permutation(permutation)[start : start + rows]
    return tuple(tf.gather(o, original) for o in shuffled_outputs)
