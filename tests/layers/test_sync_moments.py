"""cross_replica_moments: its named result against float64 NumPy statistics of each group."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.layers.sync_moments import Moments, cross_replica_moments
from tensorflow_similarity.testing import run_on_replicas


def test_moments_fields_are_named_after_what_they_are():
    assert Moments._fields == (
        "mean",
        "variance",
        "moving_mean_update",
        "moving_variance_update",
        "seen",
    )


def run_moments(xs, group_size, exchange, masks=None):
    """`cross_replica_moments` on each replica's slice; returns each replica's `Moments`."""
    channels = xs[0].shape[-1]
    reference = tf.constant(np.linspace(-1.0, 1.0, channels), tf.float32)

    def step(x, weights=None):
        ctx = tf.distribute.get_replica_context()
        return cross_replica_moments(
            x, 1, weights, ctx, group_size, exchange=exchange, reference=reference
        )

    inputs = [np.concatenate(xs)] + ([] if masks is None else [np.concatenate(masks)])
    results = run_on_replicas(step, inputs, [len(x) for x in xs]).results
    assert all(isinstance(result, Moments) for result in results)
    return results


@pytest.mark.parametrize("exchange", ["reduce", "gather"])
@pytest.mark.parametrize("masked", [False, True])
def test_one_group_moments(exchange, masked):
    rng = np.random.default_rng(0)
    sizes = [3, 0, 5, 2]
    xs = [rng.normal(4.0, 2.0, size=(n, 3)).astype("float32") for n in sizes]
    masks = None
    if masked:
        masks = [(rng.uniform(size=x.shape[:1]) > 0.3)[:, None] * np.ones_like(x) for x in xs]
    replicas = run_moments(xs, len(xs), exchange, masks)
    data = np.concatenate(xs).astype("float64")
    weights = np.concatenate(masks) if masked else np.ones_like(data)
    count = weights.sum(axis=0)
    mean = (data * weights).sum(axis=0) / count
    variance = (weights * (data - mean) ** 2).sum(axis=0) / count
    for moments in replicas:
        np.testing.assert_allclose(moments.mean, mean, rtol=1e-6)
        np.testing.assert_allclose(moments.variance, variance, rtol=1e-5)
        np.testing.assert_array_equal(moments.moving_mean_update, moments.mean)
        np.testing.assert_array_equal(moments.moving_variance_update, moments.variance)
        np.testing.assert_allclose(moments.seen, count if masked or exchange == "gather" else [10])


@pytest.mark.parametrize("exchange", ["reduce", "gather"])
def test_groups_moments_and_the_moving_update_over_groups_that_saw_data(exchange):
    rng = np.random.default_rng(1)
    sizes = [2, 3, 0, 0, 4, 1]
    xs = [rng.normal(-3.0, 0.5, size=(n, 4)).astype("float32") for n in sizes]
    replicas = run_moments(xs, 2, exchange)
    groups = [np.concatenate(xs[i : i + 2]).astype("float64") for i in range(0, 6, 2)]
    seen_groups = [g for g in groups if len(g)]
    for replica, moments in enumerate(replicas):
        group = groups[replica // 2]
        if len(group):
            np.testing.assert_allclose(moments.mean, group.mean(axis=0), rtol=1e-6)
            np.testing.assert_allclose(moments.variance, group.var(axis=0), rtol=1e-5)
        else:  # An empty group's statistics are finite; nothing uses them.
            assert np.all(np.isfinite(moments.mean)) and np.all(np.isfinite(moments.variance))
        np.testing.assert_allclose(
            moments.moving_mean_update, np.mean([g.mean(axis=0) for g in seen_groups], 0), rtol=1e-6
        )
        np.testing.assert_allclose(
            moments.moving_variance_update,
            np.mean([g.var(axis=0) for g in seen_groups], 0),
            rtol=1e-5,
        )
        np.testing.assert_array_equal(moments.seen, np.full_like(moments.seen, len(seen_groups)))
