"""collectives: each helper against NumPy on 1, 2 and 4 replicas holding unequal parts.

Every helper makes exactly one exchange per replica (one per dtype for the
owner-marking gathers), and none with a single replica: the contract callers
count on. An all-reduce is one op per replica; an all-gather of unequal parts
is two (`MirroredStrategy` gathers the parts' row counts, then the padded
rows).
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import collectives
from tensorflow_similarity.testing import count_collectives, run_on_replicas

REPLICAS = [1, 2, 4]
SIZES = {1: [5], 2: [3, 1], 4: [2, 0, 4, 1]}
DIM = 3
GATHER_OPS = 2  # an all_gather's ops per replica: the row counts, then the rows


def _data(k):
    rng = np.random.default_rng(k)
    n = sum(SIZES[k])
    return rng.normal(size=(n, DIM)), rng.integers(0, 9, size=n)


def _bounds(k):
    return np.cumsum([0, *SIZES[k]])


def _context():
    return tf.distribute.get_replica_context()


def _check_count(run, k, per_replica=1):
    assert count_collectives(run.function) == (per_replica * k if k > 1 else 0)


@pytest.mark.parametrize("k", REPLICAS)
def test_sync_replica_context_only_with_several_replicas(k):
    x, _ = _data(k)
    run = run_on_replicas(lambda x: collectives.sync_replica_context() is not None, x, SIZES[k])
    assert run.results == [k > 1] * k
    assert collectives.sync_replica_context() is None  # no strategy


@pytest.mark.parametrize("k", REPLICAS)
def test_gather_rows_stacks_every_replicas_row(k):
    x, _ = _data(k)
    run = run_on_replicas(
        lambda x: collectives.gather_rows(_context(), tf.reduce_sum(x, 0)), x, SIZES[k]
    )
    b = _bounds(k)
    expected = np.stack([x[b[i] : b[i + 1]].sum(axis=0) for i in range(k)])
    for result in run.results:
        np.testing.assert_allclose(result, expected, rtol=1e-12, atol=1e-15)
    _check_count(run, k)


def _group_sums(x, k, group_size):
    b = _bounds(k)
    rows = [x[b[i] : b[i + 1]].sum(axis=0) for i in range(k)]
    return np.stack([np.sum(rows[g : g + group_size], axis=0) for g in range(0, k, group_size)])


@pytest.mark.parametrize(("k", "group_size"), [(1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4)])
def test_sum_by_group_and_group_sum(k, group_size):
    x, _ = _data(k)
    expected = _group_sums(x, k, group_size)
    by_group = run_on_replicas(
        lambda x: collectives.sum_by_group(_context(), tf.reduce_sum(x, 0), group_size),
        x,
        SIZES[k],
    )
    mine = run_on_replicas(
        lambda x: collectives.group_sum(_context(), tf.reduce_sum(x, 0), group_size), x, SIZES[k]
    )
    for replica in range(k):
        np.testing.assert_allclose(by_group.results[replica], expected, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(
            mine.results[replica], expected[replica // group_size], rtol=1e-12, atol=1e-15
        )
    _check_count(by_group, k)
    _check_count(mine, k)


@pytest.mark.parametrize("k", REPLICAS)
def test_gather_global_batch_is_the_batch_in_replica_order_and_differentiable(k):
    x, _ = _data(k)
    weights = np.cos(np.arange(x.size)).reshape(x.shape)

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            (gathered,) = collectives.gather_global_batch(x)
            total = tf.reduce_sum(gathered * weights)
        return gathered, tape.gradient(total, x)

    run = run_on_replicas(step, x, SIZES[k])
    for gathered, _ in run.results:
        np.testing.assert_array_equal(gathered, x)
    # Every replica differentiates the whole batch: a row's gradient comes back from all k.
    np.testing.assert_allclose(run.concatenated(lambda result: result[1]), k * weights, rtol=1e-12)
    # One all-gather forward; its gradient is one all-reduce more.
    _check_count(run, k, per_replica=GATHER_OPS + 1)


@pytest.mark.parametrize("k", REPLICAS)
def test_gather_with_owner_marks_this_replicas_rows(k):
    x, labels = _data(k)
    run = run_on_replicas(
        lambda x, y: collectives.gather_with_owner(x, y, 2.0 * x), (x, labels), SIZES[k]
    )
    b = _bounds(k)
    for replica, ((gx, gy, gx2), mine) in enumerate(run.results):
        np.testing.assert_array_equal(gx, x)
        np.testing.assert_array_equal(gy, labels)
        np.testing.assert_array_equal(gx2, 2.0 * x)
        expected = np.zeros(len(x), bool)
        expected[b[replica] : b[replica + 1]] = True
        np.testing.assert_array_equal(mine, expected)
    # Two dtypes (float64 and int64): one gather each.
    _check_count(run, k, per_replica=2 * GATHER_OPS)


@pytest.mark.parametrize("k", REPLICAS)
def test_gather_keys_puts_this_replicas_rows_first(k):
    x, labels = _data(k)
    run = run_on_replicas(lambda x, y: collectives.gather_keys(x, y), (x, labels), SIZES[k])
    b = _bounds(k)
    for replica, (keys, key_labels) in enumerate(run.results):
        own = list(range(b[replica], b[replica + 1]))
        order = own + [i for i in range(len(x)) if i not in own]
        np.testing.assert_array_equal(keys, x[order])
        np.testing.assert_array_equal(key_labels, labels[order])
    _check_count(run, k, per_replica=2 * GATHER_OPS)


def test_own_rows_first_without_a_collective():
    local = (np.array([[7.0], [8.0]]),)
    gathered = (np.array([[1.0], [7.0], [8.0], [2.0]]),)
    mine = tf.constant([False, True, True, False])
    (result,) = collectives.own_rows_first(local, gathered, mine)
    np.testing.assert_array_equal(result, [[7.0], [8.0], [1.0], [2.0]])


@pytest.mark.parametrize("k", REPLICAS)
def test_global_sum_and_scale_for_replicas(k):
    x, _ = _data(k)

    def step(x):
        local = tf.reduce_sum(x, 0)
        return collectives.global_sum(local), collectives.scale_for_replicas(local)

    run = run_on_replicas(step, x, SIZES[k])
    b = _bounds(k)
    for replica, (total, scaled) in enumerate(run.results):
        np.testing.assert_allclose(total, x.sum(axis=0), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(
            scaled, x[b[replica] : b[replica + 1]].sum(axis=0) / k, rtol=1e-15, atol=1e-15
        )
    _check_count(run, k)  # scale_for_replicas issues none


def test_group_size_checks():
    assert collectives.check_group_size(None, 4) == 4
    assert collectives.check_group_size(2, 4) == 2
    with pytest.raises(
        ValueError, match=r"group_size=3 does not divide the 4 replicas.*\[1, 2, 4\]"
    ):
        collectives.check_group_size(3, 4)
    collectives.check_group_size_argument(None)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="group_size must be None"):
            collectives.check_group_size_argument(bad)
