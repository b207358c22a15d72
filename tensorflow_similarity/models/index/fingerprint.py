"""Which weights made an index's embeddings: the fingerprint, and the index's staleness.

`weights_sha256` is the fingerprint: the SHA-256 of the embedding
network's weights (dtype, shape and bytes of each, in order). A model
records it in its index when it indexes examples
(`Indexer.embedding_fingerprint`, saved and loaded with the index), and
compares it with its weights' before it searches or exports the index:
an index whose embeddings other weights made is stale (it answers with
the neighbours of the old model), which `StaleIndexWarning` (lookups,
evaluations) and `StaleIndexError` (export, adding to it) report.

Hashing every weight costs a pass over all of them on the host (about
as much as copying the model's weights off the accelerator), so lookups
reuse the fingerprint while `weights_sample_key` is unchanged: a digest
of the optimizer's step count and of a grid of a few values of every
weight, which training, `set_weights` and `load_weights` all change.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["StaleIndexError", "StaleIndexWarning", "weights_sample_key", "weights_sha256"]

# About how many values of each weight `weights_sample_key` reads, strided over every axis.
SAMPLES_PER_WEIGHT = 64


class StaleIndexWarning(UserWarning):
    """A lookup or evaluation searches embeddings that other weights than the model's made."""


class StaleIndexError(ValueError):
    """An index whose embeddings other weights made was about to be exported or added to."""


def weights_sha256(variables: Sequence[Any]) -> str:
    """The hex SHA-256 of `variables`' dtypes, shapes and values, in order.

    Args:
        variables: Keras or TensorFlow variables (or arrays).

    Returns:
        A 64-character hex digest; equal for equal values, whatever device
        or file they came from.
    """
    digest = hashlib.sha256()
    for variable in variables:
        weight = np.ascontiguousarray(np.asarray(variable))
        digest.update(f"{weight.dtype.str}{weight.shape}".encode())
        digest.update(weight.tobytes())
    return digest.hexdigest()


def weights_sample_key(variables: Sequence[Any], optimizer: Any = None) -> str:
    """A cheap digest of `variables` that changes whenever they are trained or set.

    It hashes the optimizer's step count (every `fit` or `apply_gradients`
    step moves it, even one that updates a few rows of an embedding
    table), and each variable's dtype, shape and a grid of about
    `SAMPLES_PER_WEIGHT` of its values, evenly strided along every axis
    (a dense update, or `set_weights` of other weights, moves them). One
    strided read per variable, not a pass over the weights: a change by
    another route to values off the grid (a few rows assigned by hand)
    goes unseen.

    Args:
        variables: Keras or TensorFlow variables.
        optimizer: The optimizer that trains them, or `None`.

    Returns:
        A hex digest, equal to the previous one only if none of that changed.
    """
    digest = hashlib.sha256()
    iterations = getattr(optimizer, "iterations", None)
    if iterations is not None:
        digest.update(f"step {int(np.asarray(iterations))}".encode())
    for variable in variables:
        shape = tuple(variable.shape)
        per_axis = SAMPLES_PER_WEIGHT ** (1 / max(1, len(shape)))
        grid = tuple(slice(None, None, max(1, math.ceil(n / per_axis))) for n in shape)
        sample = np.asarray(tf.convert_to_tensor(variable)[grid])
        digest.update(f"{sample.dtype.str}{shape}".encode())
        digest.update(np.ascontiguousarray(sample).tobytes())
    return digest.hexdigest()
