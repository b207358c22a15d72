"""A lookup of more neighbours than the index holds returns the whole index, as in 0.17.

0.17.1's default `k=5` meets small indexes (its own tests look up 5
neighbours in an index of 2). The expected neighbours are the index sorted
by a float64 NumPy distance, independent of the search.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.callbacks import EvalCallback
from tensorflow_similarity.indexer import Indexer


def _index(n=3, dim=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dim)).astype(np.float32)
    index = Indexer(embedding_size=dim, distance="l2")
    index.batch_add(x, labels=np.arange(n))
    return index, x


def test_batch_lookup_above_the_index_size_returns_all_it_holds_and_warns():
    index, x = _index()
    queries = np.random.default_rng(1).normal(size=(2, 4)).astype(np.float32)

    with pytest.warns(UserWarning, match="k=5 neighbours were asked for but the index holds 3"):
        lookups = index.batch_lookup(queries, k=5)

    for query, row in zip(queries, lookups, strict=True):
        expected = np.argsort(np.linalg.norm(x.astype(np.float64) - query, axis=1))
        assert [lookup.label for lookup in row] == expected.tolist()


def test_single_lookup_with_0_17s_default_k_on_an_index_of_two():
    index, x = _index(n=2)

    with pytest.warns(UserWarning, match="each lookup returns 2"):
        lookups = index.single_lookup(x[1])

    assert [lookup.label for lookup in lookups] == [1, 0]


def test_eval_callback_with_k_above_the_targets_matches_among_them_all():
    # 0.17's test builds EvalCallback(k=11) over 2 targets.
    queries = np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1]], np.float32)
    targets = np.array([[1.0, 0.1], [0.1, 1.0]], np.float32)
    callback = EvalCallback(queries, [0, 1, 1], targets, [0, 1], k=11, distance="l2")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Identity()])
    callback.set_model(model)

    with pytest.warns(UserWarning, match="k=11 neighbours were asked for but the index holds 2"):
        results = callback.evaluate()

    # Nearest target (float64 reference): query 0 -> 0 (right), 1 -> 1 (right), 2 -> 0 (wrong).
    d = np.linalg.norm(queries[:, None].astype(np.float64) - targets[None], axis=2)
    expected = np.mean(np.array([0, 1])[np.argmin(d, axis=1)] == [0, 1, 1])
    assert results == {"binary_accuracy": pytest.approx(expected)}
