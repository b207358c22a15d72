"""The base class of pairwise distances between two sets of embeddings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="Similarity")
class Distance:
    """A pairwise distance (or similarity) between query and key embeddings.

    Called as `distance(query_embeddings, key_embeddings)` (0.17's argument
    names). Subclasses implement `call(query_embeddings, key_embeddings)` for
    `[n, d]` queries and `[m, d]` keys and return the `[n, m]` matrix whose
    entry `(i, j)` compares query row `i` with key row `j`, in the dtype of
    the inputs. Gradients must be finite
    for every input, identical rows included. A distance is a plain
    serialisable object: `get_config()` holds its name and aliases, and
    `keras.saving.deserialize_keras_object` rebuilds it.

    Args:
        name: Canonical name of the distance; each subclass has its default.
        aliases: Other names `distance_canonicalizer` accepts for it; each
            subclass has its defaults.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.distances import EuclideanDistance
    >>> EuclideanDistance()(np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]])).numpy()
    array([[5.]])
    """

    default_name = "distance"
    default_aliases: tuple[str, ...] = ()

    def __init__(self, name: str | None = None, aliases: Sequence[str] | None = None) -> None:
        self.name = self.default_name if name is None else str(name)
        self.aliases = list(self.default_aliases if aliases is None else aliases)

    def call(self, query_embeddings: tf.Tensor, key_embeddings: tf.Tensor) -> tf.Tensor:
        """Returns the `[n, m]` matrix comparing every query row with every key row."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement call(query_embeddings, key_embeddings)."
        )

    def __call__(self, query_embeddings: Any, key_embeddings: Any) -> tf.Tensor:
        query = tf.convert_to_tensor(query_embeddings)
        key = tf.convert_to_tensor(key_embeddings, dtype=query.dtype)
        if len(query.shape) != 2 or len(key.shape) != 2:
            raise ValueError(
                f"{type(self).__name__} expects query and key embeddings of shape "
                f"[batch, features]. Received shapes {query.shape} and {key.shape}. "
                "Flatten or pool the embeddings first."
            )
        return self.call(query, key)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "aliases": list(self.aliases)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Distance:
        return cls(**config)


def squared_norms(x: tf.Tensor) -> tf.Tensor:
    """Returns the `[n, 1]` squared L2 norms of the rows of `x`."""
    return tf.reduce_sum(tf.square(x), axis=1, keepdims=True)


def squared_euclidean(query: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    """Returns the `[n, m]` squared Euclidean distances, clipped at zero.

    The expansion `|q|^2 - 2 q.k + |k|^2` costs one matrix product; rounding
    can make it slightly negative for near-identical rows, hence the clip.
    """
    products = tf.matmul(query, key, transpose_b=True)
    return tf.maximum(squared_norms(query) - 2.0 * products + tf.transpose(squared_norms(key)), 0.0)
