"""run_on_replicas: each replica computes on its own rows, against NumPy; bad parts rejected."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.testing import count_collectives, mirrored_strategy, run_on_replicas


def _rows_and_sum(x, labels):
    ctx = tf.distribute.get_replica_context()
    return {"rows": x * 2.0, "ids": labels + 0, "total": ctx.all_reduce("sum", tf.reduce_sum(x))}


@pytest.mark.parametrize("sizes", [[7], [3, 4], [0, 2, 4, 1]])
def test_each_replica_holds_its_rows_and_the_results_come_back_in_order(sizes):
    rng = np.random.default_rng(len(sizes))
    x = rng.normal(size=(7, 2))
    labels = np.arange(7)
    run = run_on_replicas(_rows_and_sum, (x, labels), sizes)
    bounds = np.cumsum([0, *sizes])
    for i, result in enumerate(run.results):
        np.testing.assert_array_equal(result["rows"], 2.0 * x[bounds[i] : bounds[i + 1]])
        np.testing.assert_array_equal(result["ids"], labels[bounds[i] : bounds[i + 1]])
        np.testing.assert_allclose(result["total"], x.sum(), rtol=1e-12)
    np.testing.assert_array_equal(run.concatenated(lambda r: r["rows"]), 2.0 * x)
    np.testing.assert_allclose(
        run.concatenated(lambda r: r["total"]), [x.sum()] * len(sizes), rtol=1e-12
    )
    np.testing.assert_allclose(run.summed(lambda r: r["total"]), len(sizes) * x.sum(), rtol=1e-12)
    assert run.sizes == tuple(sizes)
    assert count_collectives(run.function) == (len(sizes) if len(sizes) > 1 else 0)


@pytest.mark.parametrize(
    ("inputs", "sizes", "match"),
    [
        (np.ones((5, 2)), [2, 2], r"Input 0 has shape \[5, 2\], and sizes=\[2, 2\] split 4 rows"),
        ((np.ones(4), np.ones(3)), [2, 2], r"Input 1 has shape \[3\]"),
        (np.ones(4), [], "one non-negative row count per replica"),
        (np.ones(4), [5, -1], "one non-negative row count per replica"),
    ],
)
def test_parts_that_do_not_split_the_batch_are_rejected(inputs, sizes, match):
    def never(*args):
        raise AssertionError("traced")

    with pytest.raises(ValueError, match=match):
        run_on_replicas(never, inputs, sizes)


def test_a_strategy_of_another_size_is_rejected():
    with pytest.raises(ValueError, match=r"names 3 replicas, and the strategy has 2"):
        run_on_replicas(tf.identity, np.ones(3), [1, 1, 1], strategy=mirrored_strategy(2))


def test_eager_replicas_give_the_same_results_and_trace_nothing():
    x = np.arange(10.0).reshape(5, 2)
    run = run_on_replicas(lambda t: t * 3.0, x, [4, 1], traced=False)
    np.testing.assert_array_equal(run.concatenated(), 3.0 * x)
    assert run.function is None


def test_a_strategy_with_replicas_in_other_processes_is_rejected():
    class _TwoWorkers:  # what MultiWorkerMirroredStrategy shows one of two workers
        num_replicas_in_sync = 2
        extended = type("Extended", (), {"worker_devices": ("/job:worker/task:0/cpu:0",)})()

    with pytest.raises(ValueError, match="this process holds 1 of the strategy's 2 replicas"):
        run_on_replicas(tf.identity, np.ones(2), [1, 1], strategy=_TwoWorkers())
