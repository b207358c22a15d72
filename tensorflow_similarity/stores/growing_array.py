"""A NumPy array that grows along its first axis in amortised constant time."""

from __future__ import annotations

import numpy as np


class GrowingArray:
    """Rows appended to a preallocated buffer whose capacity doubles when full.

    `view()` is the filled part, without a copy; it is invalidated by the next
    `extend` that reallocates, so callers must not keep it across appends.

    Args:
        row_shape: The shape of one row.
        dtype: The dtype of the rows.
    """

    def __init__(self, row_shape: tuple[int, ...], dtype: np.dtype | type) -> None:
        self.row_shape = tuple(row_shape)
        self.dtype = np.dtype(dtype)
        self._buffer = np.empty((0, *self.row_shape), dtype=self.dtype)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, rows: np.ndarray) -> None:
        """Appends `rows`, an array of shape `[n, *row_shape]` already checked by the caller."""
        needed = self._size + len(rows)
        if needed > len(self._buffer):
            capacity = max(needed, 2 * len(self._buffer), 16)
            buffer = np.empty((capacity, *self.row_shape), dtype=self.dtype)
            buffer[: self._size] = self._buffer[: self._size]
            self._buffer = buffer
        self._buffer[self._size : needed] = rows
        self._size = needed

    def view(self) -> np.ndarray:
        """The filled rows, shape `[len(self), *row_shape]`, sharing the buffer."""
        return self._buffer[: self._size]

    def replace(self, rows: np.ndarray) -> None:
        """Makes `rows` the whole content (taken over, not copied)."""
        self._buffer = np.ascontiguousarray(rows, dtype=self.dtype)
        self._size = len(rows)

    def clear(self) -> None:
        self._buffer = np.empty((0, *self.row_shape), dtype=self.dtype)
        self._size = 0
