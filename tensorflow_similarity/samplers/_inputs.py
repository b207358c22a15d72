"""Checks and conversions of the `(x, y)` arrays the in-memory samplers take.

Both are done once, when a sampler or `select_examples` is called, so that a
bad input is reported before any example is indexed or drawn.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def as_indexable(x: Any, *, owner: str) -> np.ndarray:
    """Returns `x` as a NumPy array indexable by an integer array along axis 0.

    Examples of different shapes (images of different sizes, say, that a
    `load_example_fn` resizes) cannot form one dense array; they become a
    one-dimensional array of objects instead.

    Args:
        x: A NumPy array, a `tf.Tensor` or a sequence of examples.
        owner: The class or function the user called, for the message.

    Returns:
        The examples as a NumPy array of length `len(x)`.

    Raises:
        ValueError: If `x` is a scalar.
    """
    try:
        array = np.asarray(x)
    except ValueError:
        array = np.empty(len(x), dtype=object)
        for i, example in enumerate(x):
            array[i] = example
    if array.ndim == 0:
        raise ValueError(
            f"{owner}: x must hold one example per row (an array, tensor or list). "
            f"Received a scalar: {x!r}."
        )
    return array


def class_ids(y: Any, *, owner: str, name: str = "y") -> np.ndarray:
    """Returns the labels `y` as a 1-D int64 array, or raises saying what is wrong.

    Args:
        y: Integer labels of shape `[n]` or `[n, 1]` (NumPy, `tf.Tensor` or a list).
        owner: The class or function the user called, for the message.
        name: The argument's name, for the message.

    Returns:
        The `[n]` int64 class ids.

    Raises:
        ValueError: If `y` is not of shape `[n]` or `[n, 1]`.
        TypeError: If `y` does not hold integers.
    """
    labels = np.asarray(y)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise ValueError(
            f"{owner}: {name} must hold one integer class id per entry, of shape [n] or [n, 1]. "
            f"Received shape {labels.shape}."
        )
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(
            f"{owner}: {name} must hold integer class ids. Received dtype {labels.dtype}. Map "
            "class names to integers, or cast whole-number labels, e.g. y.astype('int32')."
        )
    return labels.astype(np.int64)


def check_same_length(x: np.ndarray, labels: np.ndarray, *, owner: str) -> None:
    """Raises unless `x` and the labels are non-empty and have one label per example.

    Raises:
        ValueError: If the lengths differ or are zero.
    """
    if len(x) != len(labels):
        raise ValueError(
            f"{owner}: x and y must have the same length (one label per example). "
            f"Received len(x)={len(x)} and len(y)={len(labels)}."
        )
    if len(labels) == 0:
        raise ValueError(f"{owner}: x and y are empty; pass at least one example.")


def check_class_list(class_list: Any, present: np.ndarray, *, owner: str) -> list[int] | None:
    """Returns the requested classes, sorted and deduplicated, or `None` for all.

    Args:
        class_list: `None`, an empty sequence (both: every class) or integer class ids.
        present: The class ids found in `y`.
        owner: The class or function the user called, for the message.

    Returns:
        The sorted distinct class ids, or `None`.

    Raises:
        ValueError: If an entry is not an integer or names a class absent from `y`.
    """
    if class_list is None:
        return None
    if len(class_list) == 0:
        return None
    requested = class_ids(class_list, owner=owner, name="class_list")
    missing = np.setdiff1d(requested, present)
    if missing.size:
        raise ValueError(
            f"{owner}: class_list names classes with no example in y: {missing.tolist()}. "
            f"The classes in y are {np.unique(present).tolist()}."
        )
    return np.unique(requested).tolist()
