"""Checks of a batch's class make-up, written with plain loops (independent of the samplers)."""

from __future__ import annotations

import numpy as np


def labelled_set(counts: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Examples `[n, 2]` float32 whose row is `(example id, class)`, and their int labels.

    The rows are interleaved across classes, so that class order differs from row order.
    """
    labels = []
    for class_id, count in counts.items():
        labels.extend([class_id] * count)
    labels = np.array(labels, dtype=np.int32)
    order = np.random.default_rng(123).permutation(len(labels))
    labels = labels[order]
    x = np.stack([np.arange(len(labels)), labels], axis=1).astype(np.float32)
    return x, labels


def assert_balanced(x, y, classes_per_batch: int, examples_per_class: int, distinct=True):
    """Asserts the batch holds exactly the requested classes and counts, grouped by class.

    `x` rows are `(example id, class)`; `distinct` also asserts no example repeats.
    """
    x = np.asarray(x)
    y = np.asarray(y).reshape(-1).tolist()
    assert len(y) == classes_per_batch * examples_per_class
    counts: dict[int, int] = {}
    for label in y:
        counts[label] = counts.get(label, 0) + 1
    assert len(counts) == classes_per_batch, counts
    for label, count in counts.items():
        assert count == examples_per_class, (label, counts)
    for start in range(0, len(y), examples_per_class):
        block = y[start : start + examples_per_class]
        assert block == [block[0]] * examples_per_class, y
    for row, label in zip(x, y, strict=True):
        assert int(row[1]) == label
    if distinct:
        ids = [int(row[0]) for row in x]
        assert len(set(ids)) == len(ids), ids
