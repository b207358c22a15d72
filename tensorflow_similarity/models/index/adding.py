"""`IndexMixin`'s verbs that change the index: index examples, upsert, remove, compact, reset.

Each is a method of `IndexMixin` (which binds them, see `mixin.py`): it
checks its arguments before anything is predicted, embeds with the
model, and hands the embeddings to the model's `Indexer`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tensorflow_similarity.indexer.streaming import is_stream, stream_elements, unpack_element
from tensorflow_similarity.models.index.arguments import check_length

__all__ = [
    "compact_index",
    "index",
    "index_single",
    "remove_from_index",
    "reset_index",
    "upsert_index",
]


def index(
    self,
    x: Any,
    y: Any = None,
    data: Any = None,
    build: bool = True,
    verbose: int = 1,
) -> None:
    """Embeds `x` and adds the embeddings, with `y` and `data`, to the index.

    `x` may also be a stream of batches: a `tf.data.Dataset` or any
    iterator whose elements are, as for Keras' `fit`, `x`, `(x,)`,
    `(x, y)` or `(x, y, data)`. Each batch is embedded, added and
    dropped before the next is read, so the examples and their
    embeddings are never all in memory; the add is all or nothing, as
    `Indexer.batch_add` of a stream (which documents what a failed add
    leaves).

    Args:
        x: A batch of examples, or a stream of batches.
        y: Their integer classes, or `None` (`None` for a stream).
        data: Items kept with them (returned by lookups), or `None`
            (`None` for a stream).
        build: Kept for 0.17's signature.
        verbose: Print progress if 1. Defaults to 1.

    Raises:
        ValueError: If `x` does not fit the model's input, or `y` or
            `data` does not have one item per example; for a stream, as
            `Indexer.batch_add`, and if a batch does not fit the
            model's input (its number, from 0, is named).
        StaleIndexError: If the index holds embeddings that other
            weights made (the model trained since it indexed them):
            `reset_index()`, then index all examples again.

    Example:

    >>> import keras, numpy as np, tensorflow as tf
    >>> from tensorflow_similarity.models import SimilarityModel
    >>> inputs = keras.Input((3,))
    >>> model = SimilarityModel(inputs, keras.layers.Dense(2)(inputs))
    >>> model.compile("sgd", "mse", distance="l2")
    >>> rows = np.arange(12, dtype="float32").reshape(4, 3)
    >>> dataset = tf.data.Dataset.from_tensor_slices((rows, [0, 1, 0, 1])).batch(2)
    >>> model.index(dataset, verbose=0)
    >>> model.index_size()
    4
    """
    if is_stream(x):
        self._index_stream(x, y, data, build, verbose)
        return
    x = self._index_batch(x)
    check_length("y", y, len(x))
    check_length("data", data, len(x))
    fingerprint = self._fingerprint_to_record()
    if verbose:
        print(f"[Indexing {len(x)} examples]")
    self._index.batch_add(self._embed(x), labels=y, data=data, build=build, verbose=verbose)
    self._index.embedding_fingerprint = fingerprint


def _index_stream(self, stream: Any, y: Any, data: Any, build: bool, verbose: int) -> None:
    """`index` of a stream: each batch embedded as the indexer reads it."""
    if y is not None or data is not None:
        raise ValueError(
            "index(x=stream): y= and data= go inside the stream's elements, as (x, y) or "
            "(x, y, data) tuples; got a stream and y or data beside it."
        )
    fingerprint = self._fingerprint_to_record()
    size = self._index.size()
    if verbose:
        print("[Indexing a stream of batches]")
    self._index.batch_add(self._embedded_batches(stream), build=build, verbose=verbose)
    self._index.embedding_fingerprint = fingerprint
    if verbose:
        print(f"[Indexed {self._index.size() - size} examples]")


def _embedded_batches(self, stream: Any) -> Iterator[tuple[Any, Any, Any]]:
    """`(embeddings, y, data)` of each element of `stream`, checked, then embedded."""
    for number, element in enumerate(stream_elements(stream)):
        try:
            x, y, data = unpack_element(element)
            x = self._index_batch(x)
            check_length("y", y, len(x))
            check_length("data", data, len(x))
        except ValueError as error:
            raise ValueError(f"Batch {number} of the stream was refused: {error}") from error
        yield self._embed(x), y, data


def index_single(
    self,
    x: Any,
    y: int | None = None,
    data: Any = None,
    build: bool = True,
    verbose: int = 1,
) -> None:
    """Embeds one example and adds it, with `y` and `data`, to the index.

    Args:
        x: One example (without batch axis).
        y: Its class, or `None`.
        data: An item kept with it, or `None`.
        build: Kept for 0.17's signature.
        verbose: Print progress if 1. Defaults to 1.

    Raises:
        StaleIndexError: As `index`.
    """
    x = self._index_batch(np.asarray(x)[None])
    fingerprint = self._fingerprint_to_record()
    if verbose:
        print("[Indexing 1 example]")
    self._index.add(self._embed(x), label=y, data=data, build=build)
    self._index.embedding_fingerprint = fingerprint


def upsert_index(self, ids: Any, x: Any, y: Any = None, data: Any = None) -> None:
    """Embeds `x` and puts each example under its id, replacing the one it held, if any.

    Args:
        ids: One distinct non-negative integer id per example: an
            indexed example's (replaced) or a new one (added).
        x: A batch of examples.
        y: Their integer classes, or `None`.
        data: Items kept with them (returned by lookups), or `None`.

    Raises:
        ValueError: As `index`, or if `ids` are not one valid id per
            example; nothing changes then.
        StaleIndexError: As `index`.
    """
    x = self._index_batch(x)
    check_length("y", y, len(x))
    check_length("data", data, len(x))
    check_length("ids", ids, len(x), required=True)
    fingerprint = self._fingerprint_to_record()
    self._index.upsert(ids, self._embed(x), labels=y, data=data)
    self._index.embedding_fingerprint = fingerprint


def remove_from_index(self, ids: Any) -> None:
    """Removes the indexed examples `ids` (`Lookup.id`): no lookup returns them again.

    Args:
        ids: Distinct ids of indexed examples.

    Raises:
        ValueError: If an id is not an integer, is given twice or is not
            an indexed example's; nothing is removed then.
    """
    self._index.remove(ids)


def compact_index(self) -> None:
    """Drops removed examples from the index's memory and files; lookups are unchanged."""
    self._index.compact()


def reset_index(self) -> None:
    """Empties the index (and forgets its calibration and fingerprint)."""
    self._index.reset()
