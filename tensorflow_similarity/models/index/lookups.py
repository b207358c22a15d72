"""`IndexMixin`'s verbs that read the index: look up, size, summary; the checks before a prediction.

Each is a method of `IndexMixin` (which binds them, see `mixin.py`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.indexer.streaming import is_stream
from tensorflow_similarity.models.index.arguments import keras_rank_adjusted
from tensorflow_similarity.types import Lookup

__all__ = ["index_size", "index_summary", "lookup", "single_lookup", "to_data_frame"]


def lookup(self, x: Any, k: int = 5, verbose: int = 1) -> list[list[Lookup]]:
    """Returns, per example of `x`, its `k` nearest indexed examples, nearest first.

    Args:
        x: A batch of examples; an empty one (`n = 0`) returns `[]`.
        k: Neighbours per example. Defaults to 5.
        verbose: Unused; kept for 0.17's signature.

    Returns:
        Per example, `k` `Lookup`s by increasing distance (fewer when an
        approximate search found fewer; see `Indexer.batch_lookup`): a
        list of `n` lists, empty for an empty batch. A `k` above
        `index_size()` returns the whole index, with a warning, as 0.17
        did. A stale index (see the class) warns `StaleIndexWarning`.

    Raises:
        ValueError: If the index is empty, `k` is below 1 or `x` does not
            fit the model's input.
    """
    x = self._index_batch(x)
    self._check_lookup(k)
    return self._index.batch_lookup(self._embed(x), k=k, verbose=verbose)


def single_lookup(self, x: Any, k: int = 5) -> list[Lookup]:
    """Returns the `k` nearest indexed examples of one example, nearest first.

    Args:
        x: One example (without batch axis).
        k: Neighbours. Defaults to 5.

    Returns:
        As one row of `lookup`'s (and its warnings).
    """
    x = self._index_batch(np.asarray(x)[None])
    self._check_lookup(k)
    return self._index.single_lookup(self._embed(x), k=k)


def index_size(self) -> int:
    """Returns the number of indexed examples."""
    return self._index.size()


def index_summary(self) -> None:
    """Prints the index's configuration and statistics."""
    self._index.print_stats()


def to_data_frame(self, num_items: int = 0) -> Any:
    """Returns the indexed records as a pandas `DataFrame` (needs pandas)."""
    return self._index.to_data_frame(num_items=num_items)


def _embed(self, x: np.ndarray) -> Any:
    """`_index_embeddings(x)`; `[0, dim]` zeros for an empty batch (Keras' predict fails)."""
    if len(x) == 0:
        return np.zeros((0, self._index.embedding_size), np.float32)
    return self._index_embeddings(x)


def _index_batch(self, x: Any) -> Any:
    if is_stream(x):
        raise ValueError(
            f"Expected an array of examples, got a stream ({type(x).__name__}): only "
            "index() takes a tf.data.Dataset or an iterator of batches. Pass "
            "np.concatenate of its batches, or call the verb batch by batch."
        )
    if isinstance(x, (tf.Tensor, tf.Variable)):
        x = x.numpy()
    x = np.asarray(x)
    expected = self._index_input_shape()
    if expected is not None:
        x = keras_rank_adjusted(x, expected)
        shape = x.shape[1:]
        fits = len(shape) == len(expected) and all(
            e is None or e == s for e, s in zip(expected, shape, strict=True)
        )
        if x.ndim == 0 or not fits:
            raise ValueError(
                f"Expected a batch of examples of shape {tuple(expected)}; got an array of "
                f"shape {x.shape}. Pass x of shape (n, *{tuple(expected)}) (for one "
                "example, index_single/single_lookup)."
            )
    return x


def _check_lookup(self, k: int) -> None:
    size = self._index.size()
    if size == 0:
        raise ValueError(
            "The index is empty: call model.index(x, y) (or load_index) before looking "
            "up, evaluating, calibrating or matching."
        )
    # A k above the index size is not refused: the index returns all it holds and
    # warns, as 0.17 returned fewer neighbours.
    check_int("k", k, minimum=1, owner=type(self).__name__)
    self._warn_if_stale()
