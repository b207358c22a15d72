"""0.17's `batch_class_ratio`: how many examples of each class a sampler's batches hold."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np

from tensorflow_similarity._validation import check_int

__all__ = ["batch_class_ratio"]


def batch_class_ratio(sampler: Iterable[Any], num_batches: int = 100) -> float:
    """Returns the mean, over a sampler's first batches, of examples per class in a batch.

    A metric loss needs at least 2 examples of a class in a batch to form a
    positive pair, so a sampler for one should give 2 or more.

    Args:
        sampler: A sampler (or any sequence or iterable of `(x, y)` batches,
            a `tf.data.Dataset` included), `y` the batch's integer labels.
        num_batches: How many batches to read, at most. Defaults to 100.

    Returns:
        The mean of `len(y) / number of distinct labels in y` over the
        batches read (0.17 divided the sum by one more than that number when
        the sampler had more batches: 1.98 for 2 examples per class).

    Raises:
        ValueError: If `num_batches` is not a positive integer or the sampler
            yields no batch.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.samplers import MultiShotMemorySampler
    >>> from tensorflow_similarity.training_metrics import batch_class_ratio
    >>> x, y = np.zeros((40, 2)), np.repeat(np.arange(10), 4)
    >>> sampler = MultiShotMemorySampler(x, y, classes_per_batch=4,
    ...                                  examples_per_class_per_batch=2)
    >>> batch_class_ratio(sampler, num_batches=5)
    2.0
    """
    num_batches = check_int("num_batches", num_batches, minimum=1, owner="batch_class_ratio")
    if hasattr(sampler, "__len__") and hasattr(sampler, "__getitem__"):
        # Keras' PyDataset: indexing stops at its length (iterating it may not).
        batches = (sampler[i] for i in range(min(num_batches, len(sampler))))
    else:
        batches = itertools.islice(iter(sampler), num_batches)
    ratios = []
    for batch in batches:
        labels = np.asarray(batch[1]).reshape(-1)
        ratios.append(len(labels) / len(np.unique(labels)))
    if not ratios:
        raise ValueError("The sampler yielded no batch: batch_class_ratio needs at least one.")
    return float(np.mean(ratios))
