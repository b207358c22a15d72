"""`select_examples`: a random subset of a labelled set, restricted by class and count."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.samplers._inputs import (
    as_indexable,
    check_class_list,
    check_same_length,
    class_ids,
)


def selection_indices(
    labels: np.ndarray,
    class_list: list[int] | None,
    num_examples_per_class: int | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Returns the shuffled indices `select_examples` keeps, from checked inputs.

    Args:
        labels: `[n]` int64 class ids.
        class_list: Sorted distinct classes to keep, or `None` for all.
        num_examples_per_class: The most examples kept per class, or `None`.
        rng: The source of randomness.

    Returns:
        The kept indices into `labels`, in random order.
    """
    classes = np.unique(labels) if class_list is None else np.asarray(class_list)
    kept = []
    for class_id in classes:
        members = np.flatnonzero(labels == class_id)
        if num_examples_per_class is not None and len(members) > num_examples_per_class:
            members = rng.choice(members, size=num_examples_per_class, replace=False)
        kept.append(members)
    indices = np.concatenate(kept)
    rng.shuffle(indices)
    return indices


def select_examples(
    x: Any,
    y: Any,
    class_list: Sequence[int] | None = None,
    num_examples_per_class: int | None = None,
    *,
    seed: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Randomly selects at most `num_examples_per_class` examples of each class.

    The selection is drawn without replacement, so no example appears twice; a
    class with fewer examples keeps them all. (0.17 drew with replacement, so
    its subsets could repeat an example and miss others.) The result is
    shuffled.

    Args:
        x: The examples: a NumPy array, a `tf.Tensor` or a sequence, one per row.
        y: Integer class ids, of shape `[n]` or `[n, 1]`.
        class_list: The classes to keep. Defaults to `None` (an empty sequence
            too): every class.
        num_examples_per_class: The most examples kept per class. Defaults to
            `None`: all of them.
        seed: Non-negative integer seed; the same seed selects the same
            examples in the same order. Defaults to `None`: a fresh random
            selection at each call.

    Returns:
        `(x_selected, y_selected)`, NumPy arrays holding the selected rows of
        `x` and `y` (with `y`'s original dtype and shape per row).

    Raises:
        ValueError: If `x` and `y` differ in length or are empty, if `y` is not
            of shape `[n]` or `[n, 1]`, if `class_list` names a class absent from
            `y`, or if `num_examples_per_class` or `seed` is not a valid integer.
        TypeError: If `y` does not hold integers.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.samplers import select_examples
    >>> x = np.arange(10.0)[:, None]
    >>> y = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2, 2])
    >>> xs, ys = select_examples(x, y, class_list=[0, 2], num_examples_per_class=2, seed=0)
    >>> sorted(ys.tolist())
    [0, 0, 2, 2]
    """
    owner = "select_examples"
    num_examples_per_class = check_int(
        "num_examples_per_class", num_examples_per_class, minimum=1, allow_none=True, owner=owner
    )
    seed = check_int("seed", seed, minimum=0, allow_none=True, owner=owner)
    examples = as_indexable(x, owner=owner)
    labels = class_ids(y, owner=owner)
    check_same_length(examples, labels, owner=owner)
    classes = check_class_list(class_list, labels, owner=owner)
    indices = selection_indices(
        labels, classes, num_examples_per_class, np.random.default_rng(seed)
    )
    return examples[indices], np.asarray(y)[indices]
