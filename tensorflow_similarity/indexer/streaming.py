"""Adding a stream of batches to an `Indexer`, all or nothing (`Indexer.batch_add`).

A stream is a `tf.data.Dataset` or any iterator; its elements are read as
Keras' `fit` reads its own: `x`, `(x,)`, `(x, y)` or `(x, y, data)`. Each
batch is checked, added to the store and the search, and dropped before
the next one is read, so the stream is never held whole. A failed add is
undone with the lifecycle's verbs: the rows added are removed and the
index compacted (`tensorflow_similarity.indexer.lifecycle`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity.indexer.lifecycle import compact_items

if TYPE_CHECKING:
    from tensorflow_similarity.indexer.indexer import Indexer


def is_stream(value: Any) -> bool:
    """Whether `value` is a stream of batches: a `tf.data.Dataset` or any iterator.

    A list, a tuple or an array is one batch (of rows, or a multi-output
    prediction), never a stream.
    """
    return isinstance(value, (tf.data.Dataset, Iterator))


def stream_elements(stream: Any) -> Iterator[Any]:
    """The elements of `stream`, those of a `tf.data.Dataset` as NumPy values."""
    if isinstance(stream, tf.data.Dataset):
        return stream.as_numpy_iterator()
    return stream


def unpack_element(element: Any) -> tuple[Any, Any, Any]:
    """`(x, y, data)` of one element of a stream, as Keras' `fit` reads its elements.

    A tuple is `(x,)`, `(x, y)` or `(x, y, data)`; anything else (an array,
    a tensor, a list of a multi-output prediction's outputs) is `x` alone.
    `y` and `data` are `None` where absent.

    Raises:
        ValueError: If the element is a tuple of another length, or a dict.
    """
    if isinstance(element, Mapping):
        raise ValueError(
            f"it is a dict (keys {sorted(map(str, element))}); the "
            "elements of a stream are x, or tuples (x,), (x, y) or (x, y, data). Map the "
            "dataset to tuples first: dataset.map(lambda d: (d['x'], d['y']))."
        )
    if not isinstance(element, tuple):
        return element, None, None
    if not 1 <= len(element) <= 3:
        raise ValueError(
            f"it is a tuple of {len(element)} items; the elements "
            "of a stream are x, or tuples (x,), (x, y) or (x, y, data)."
        )
    x, y, data = (*element, None, None)[:3]
    return x, y, data


class StreamLayout:
    """Whether a stream's batches carry labels and data: what its first batch has.

    Every later batch must have the same, so that no item is indexed without
    the label its neighbours have.
    """

    def __init__(self, y: Any, data: Any) -> None:
        self.labels = y is not None
        self.data = data is not None

    def check(self, y: Any, data: Any) -> None:
        """Raises unless a batch with `y` and `data` has labels and data as the first had."""
        for what, has, first in (
            ("labels", y is not None, self.labels),
            ("data", data is not None, self.data),
        ):
            if has != first:
                raise ValueError(
                    f"it {'has' if has else 'has no'} {what} but the first batch "
                    f"{'had them' if first else 'had none'}. Give {what} in every batch or in "
                    "none."
                )


def add_stream(index: Indexer, stream: Any) -> int:
    """Adds a stream of batches to `index`, all or nothing (see `Indexer.batch_add`).

    Each element is `x`, `(x,)`, `(x, y)` or `(x, y, data)` with `x` a batch
    of embeddings; each batch is checked, added to the store and the search,
    and dropped before the next is read. The first batch is read and checked
    before anything is added. If a later batch is refused, or the stream or
    a backend raises (`KeyboardInterrupt` too), the batches already added
    are removed, the index compacted (`compact_items`) and the id counter
    set back, so the index answers and counts as before the call; a note on
    the error says so.

    Returns:
        The number of embeddings added.

    Raises:
        ValueError: If the stream has no batches, or a batch is refused (its
            number, counted from 0, in the message).
    """
    elements = iter(stream_elements(stream))
    first = next(elements, _END)
    if first is _END:
        raise ValueError(
            "Indexer.batch_add got an empty stream: it yielded no batches, so nothing was "
            "added. Pass a dataset or iterator that yields batches of embeddings."
        )
    layout, batch = _read_batch(index, first, None, 0)
    rows, next_id = len(index._items), index._items.next_id
    added = number = 0
    try:
        while True:
            index._add_checked(*batch)
            added += len(batch[0])
            number += 1
            element = next(elements, _END)
            if element is _END:
                return added
            _, batch = _read_batch(index, element, layout, number)
    except BaseException as error:
        undone = _undo_stream(index, rows, next_id)
        if undone and not added:
            error.add_note("Indexer.batch_add: nothing had been added; the index is unchanged.")
        elif undone:
            error.add_note(
                f"Indexer.batch_add: the {number} batch{'' if number == 1 else 'es'} before "
                f"the error ({added} embeddings) were removed again and the index compacted: "
                "it holds what it held before the call."
            )
        else:
            error.add_note(
                "Indexer.batch_add: the embeddings added before the error could not be "
                "removed again (the backend failed too); reset() the index, or load its save."
            )
        raise


_END = object()


def _read_batch(
    index: Indexer, element: Any, layout: StreamLayout | None, number: int
) -> tuple[StreamLayout, tuple[np.ndarray, Any, Any]]:
    """The layout (the first batch's, if `layout` is `None`) and checked batch `number`."""
    try:
        x, y, data = unpack_element(element)
        if layout is None:
            layout = StreamLayout(y, data)
        layout.check(y, data)
        return layout, index._checked_batch(x, y, data)
    except ValueError as error:
        raise ValueError(f"Batch {number} of the stream was refused: {error}") from error


def _undo_stream(index: Indexer, rows: int, next_id: int) -> bool:
    """Removes every row a failed `add_stream` added after row `rows`; whether it could.

    A batch the store took but the search did not (its `batch_add` failed)
    is in the store and the table only, and removed from them.
    """
    items, store = index._items, index.kv_store
    if store.size() == len(items) == rows:
        return True
    try:
        if store.size() > len(items):
            items.assign(store.size() - len(items))
        new_ids = items.ids()[rows:].copy()
        in_search = new_ids[index.search._present(new_ids)] if len(new_ids) else new_ids
        if len(in_search):
            index.search.remove(in_search)
        items.kill(np.arange(rows, len(items), dtype=np.int64))
        compact_items(index)
        items.next_id = next_id
    except Exception:  # noqa: BLE001 - the first error is the one raised; a note says this
        return False
    return True
