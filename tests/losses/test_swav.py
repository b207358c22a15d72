"""SwAV's Sinkhorn-Knopp codes and SwAVLoss against float64 NumPy loops, on 1 and K replicas."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses.swav import SwAVLoss, sinkhorn_knopp
from tensorflow_similarity.testing import (
    assert_replica_parity,
    count_collectives,
    run_on_replicas,
    uneven_sizes,
)

K = 5


def reference_sinkhorn(scores, epsilon, iterations):
    """The paper's `distributed_sinkhorn` on one device, in float64 with plain loops."""
    s = np.float64(scores)
    batch, prototypes = s.shape
    q = [[math.exp(s[b, k] / epsilon) for b in range(batch)] for k in range(prototypes)]
    total = sum(sum(row) for row in q)
    q = [[x / total for x in row] for row in q]
    for _ in range(iterations):
        for k in range(prototypes):
            row = sum(q[k])
            q[k] = [x / row / prototypes for x in q[k]]
        for b in range(batch):
            column = sum(q[k][b] for k in range(prototypes))
            for k in range(prototypes):
                q[k][b] = q[k][b] / column / batch
    return np.array([[q[k][b] * batch for k in range(prototypes)] for b in range(batch)])


def _logsumexp(values):
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def reference_sinkhorn_log_domain(scores, epsilon, iterations):
    """The same iterations on log-codes, with plain loops: finite for scores of any size."""
    s = np.float64(scores)
    batch, prototypes = s.shape
    log_q = [[s[b, k] / epsilon for k in range(prototypes)] for b in range(batch)]
    for _ in range(iterations):
        for k in range(prototypes):
            shift = _logsumexp([log_q[b][k] for b in range(batch)]) + math.log(prototypes)
            for b in range(batch):
                log_q[b][k] -= shift
        for b in range(batch):
            shift = _logsumexp(log_q[b]) + math.log(batch)
            log_q[b] = [v - shift for v in log_q[b]]
    return np.array([[math.exp(v) * batch for v in row] for row in log_q])


def reference_terms(code_scores, scores, temperature, epsilon, iterations):
    """SwAV's per-sample loss (main_swav.py): each code view against each other view."""
    code_scores, scores = np.float64(code_scores), np.float64(scores)
    n, code_views, prototypes = code_scores.shape
    views = scores.shape[1]
    codes = [reference_sinkhorn(code_scores[:, v], epsilon, iterations) for v in range(code_views)]
    terms = []
    for i in range(n):
        total = 0.0
        for v in range(code_views):
            for w in range(views):
                if w == v:
                    continue
                logits = [scores[i, w, k] / temperature for k in range(prototypes)]
                normaliser = _logsumexp(logits)
                total -= sum(codes[v][i, k] * (logits[k] - normaliser) for k in range(prototypes))
        terms.append(total / (code_views * (views - 1)))
    return np.array(terms)


def reference_gradient(code_scores, scores, temperature, epsilon, iterations):
    """The hand-derived gradient of the mean loss, the codes held fixed.

    d loss / d scores[i, w] = sum_{v < V_c, v != w} (softmax(scores[i, w] / T) - q_v[i])
                              / (T * N * V_c * (V - 1)).
    """
    code_scores, scores = np.float64(code_scores), np.float64(scores)
    n, code_views, prototypes = code_scores.shape
    views = scores.shape[1]
    codes = [reference_sinkhorn(code_scores[:, v], epsilon, iterations) for v in range(code_views)]
    gradient = np.zeros_like(scores)
    scale = temperature * n * code_views * (views - 1)
    for i in range(n):
        for w in range(views):
            logits = [scores[i, w, k] / temperature for k in range(prototypes)]
            normaliser = _logsumexp(logits)
            for v in range(code_views):
                if v == w:
                    continue
                for k in range(prototypes):
                    softmax = math.exp(logits[k] - normaliser)
                    gradient[i, w, k] += (softmax - codes[v][i, k]) / scale
    return gradient


def _scores(batch, views, seed=0, prototypes=K):
    """Cosine-like scores `[batch, views, K]`, in [-1, 1] as those of normalised prototypes."""
    return np.tanh(np.random.default_rng(seed).normal(size=(batch, views, prototypes)))


@pytest.mark.parametrize(
    ("batch", "epsilon", "iterations"), [(1, 0.05, 3), (6, 0.05, 3), (9, 0.5, 1), (4, 0.1, 10)]
)
def test_sinkhorn_matches_the_papers_algorithm(batch, epsilon, iterations):
    scores = _scores(batch, 1, seed=batch)[:, 0]

    codes = sinkhorn_knopp(scores, epsilon, iterations).numpy()

    expected = reference_sinkhorn(scores, epsilon, iterations)
    np.testing.assert_allclose(codes, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(
        expected, reference_sinkhorn_log_domain(scores, epsilon, iterations), rtol=1e-10
    )
    assert codes.dtype == np.float64


def test_sinkhorn_solves_each_view_apart_and_carries_no_gradient():
    scores = tf.constant(_scores(6, 3, seed=1))

    with tf.GradientTape() as tape:
        tape.watch(scores)
        codes = sinkhorn_knopp(scores, 0.05, 3)

    for v in range(3):
        expected = reference_sinkhorn(scores.numpy()[:, v], 0.05, 3)
        np.testing.assert_allclose(codes.numpy()[:, v], expected, rtol=1e-12, atol=1e-15)
    assert tape.gradient(codes, scores) is None


@pytest.mark.parametrize("replicas", [2, 4])
def test_sinkhorn_across_replicas_is_that_of_the_global_batch(replicas):
    # 9 rows: 4 replicas hold [0, 2, 3, 4] of them, 2 hold [3, 6].
    scores = _scores(9, 2, seed=replicas)
    run = run_on_replicas(lambda s: sinkhorn_knopp(s, 0.05, 3), scores, uneven_sizes(9, replicas))
    codes = run.concatenated()

    for v in range(2):
        expected = reference_sinkhorn(scores[:, v], 0.05, 3)
        np.testing.assert_allclose(codes[:, v], expected, rtol=1e-12, atol=1e-15)
    # One all-reduce per iteration (each replica's op counted), for both views together.
    assert count_collectives(run.function) == 3 * replicas


@pytest.mark.parametrize(
    ("batch", "code_views", "views", "temperature"),
    [(1, 1, 2, 0.1), (5, 2, 2, 0.1), (6, 2, 6, 0.2), (4, 1, 3, 1.0)],
)
def test_loss_matches_numpy_formula(batch, code_views, views, temperature):
    scores = _scores(batch, views, seed=batch + views)
    code_scores = scores[:, :code_views]
    expected = reference_terms(code_scores, scores, temperature, 0.05, 3)

    def loss(**kwargs):
        return SwAVLoss(temperature=temperature, dtype="float64", **kwargs)(code_scores, scores)

    np.testing.assert_allclose(loss().numpy(), expected.mean(), rtol=1e-12)
    np.testing.assert_allclose(loss(reduction="sum").numpy(), expected.sum(), rtol=1e-12)
    np.testing.assert_allclose(loss(reduction="none").numpy(), expected, rtol=1e-12)


def test_gradient_is_the_hand_derived_one_and_skips_the_codes():
    scores = _scores(6, 4, seed=2)
    code_scores, predictions = tf.constant(scores[:, :2]), tf.constant(scores)

    with tf.GradientTape(persistent=True) as tape:
        tape.watch([code_scores, predictions])
        value = SwAVLoss(temperature=0.2, dtype="float64")(code_scores, predictions)
    gradient = tape.gradient(value, predictions).numpy()

    assert tape.gradient(value, code_scores) is None
    expected = reference_gradient(scores[:, :2], scores, 0.2, 0.05, 3)
    np.testing.assert_allclose(gradient, expected, rtol=1e-10, atol=1e-14)
    # The hand derivation itself, against a central difference of the NumPy loss.
    step, index = 1e-6, np.unravel_index(np.argmax(np.abs(expected)), expected.shape)
    bumped = [scores.copy(), scores.copy()]
    bumped[0][index] += step
    bumped[1][index] -= step
    up, down = (reference_terms(scores[:, :2], b, 0.2, 0.05, 3).mean() for b in bumped)
    np.testing.assert_allclose(expected[index], (up - down) / (2 * step), rtol=1e-6)


def test_loss_across_replicas_is_that_of_one_device():
    # 2 global and 2 local crops, unequal parts, an empty one on 4 replicas.
    scores = _scores(9, 4, seed=3)

    results = assert_replica_parity(
        SwAVLoss(temperature=0.5, dtype="float64"), scores[:, :2], scores, replicas=(2, 4)
    )

    assert 0 in results[-1].sizes
    assert results[0].scale > 1e-3


@pytest.mark.parametrize(
    ("policy", "low"), [("mixed_float16", "float16"), ("mixed_bfloat16", "bfloat16")]
)
def test_logits_of_1e4_stay_finite_under_low_precision_policies(policy, low):
    keras.config.set_dtype_policy(policy)
    # View 0: scores of magnitude 1e4, logits of 2e5, whose exp overflows even float64.
    # Views 1 and 2: cosine-sized scores, whose codes are far from one-hot.
    raw = _scores(8, 3, seed=4)
    raw[:, 0] *= 1e4
    scores = tf.cast(raw, low)
    as_float32 = tf.cast(scores, "float32")

    codes = sinkhorn_knopp(scores[:, :2])
    value = SwAVLoss()(scores[:, :2], scores)

    assert codes.dtype == tf.float32 and value.dtype == tf.float32
    assert np.all(np.isfinite(codes.numpy())) and np.isfinite(value.numpy())
    # Cast up before any arithmetic: the float32 computation on the same rounded scores.
    np.testing.assert_array_equal(codes.numpy(), sinkhorn_knopp(as_float32[:, :2]).numpy())
    keras.config.set_dtype_policy("float32")
    np.testing.assert_array_equal(value.numpy(), SwAVLoss()(as_float32[:, :2], as_float32))
    # Against float64 loops on the same rounded scores: float32's rounding, and no more.
    for v in range(2):
        expected = reference_sinkhorn_log_domain(as_float32.numpy()[:, v], 0.05, 3)
        np.testing.assert_allclose(codes.numpy()[:, v], expected, atol=1e-6)


def test_config_round_trip():
    loss = SwAVLoss(
        temperature=0.2,
        epsilon=0.1,
        sinkhorn_iterations=5,
        reduction="sum",
        name="s",
        dtype="float64",
    )
    scores = _scores(4, 3, seed=5)

    serialized = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(serialized)

    assert serialized["registered_name"] == "Similarity>SwAVLoss"
    assert restored.get_config() == loss.get_config()
    assert {k: loss.get_config()[k] for k in ("temperature", "epsilon", "sinkhorn_iterations")} == {
        "temperature": 0.2,
        "epsilon": 0.1,
        "sinkhorn_iterations": 5,
    }
    np.testing.assert_allclose(
        restored(scores[:, :2], scores).numpy(), loss(scores[:, :2], scores).numpy(), rtol=1e-12
    )


def test_is_exported_from_losses():
    from tensorflow_similarity import losses

    assert losses.SwAVLoss is SwAVLoss and losses.sinkhorn_knopp is sinkhorn_knopp


def test_rejects_bad_hyperparameters():
    for value in (0.0, -0.1, float("nan"), float("inf"), "0.1", None, True):
        with pytest.raises(ValueError, match="SwAVLoss: temperature must be a finite number > 0"):
            SwAVLoss(temperature=value)
        with pytest.raises(ValueError, match="SwAVLoss: epsilon must be a finite number > 0"):
            SwAVLoss(epsilon=value)
        with pytest.raises(ValueError, match="sinkhorn_knopp: epsilon must be a finite"):
            sinkhorn_knopp(np.zeros((2, K)), epsilon=value)
    for value in (0, -1, 2.0, "3", None, True):
        with pytest.raises(ValueError, match="SwAVLoss: sinkhorn_iterations must be a positive"):
            SwAVLoss(sinkhorn_iterations=value)
        with pytest.raises(ValueError, match="sinkhorn_knopp: iterations must be a positive"):
            sinkhorn_knopp(np.zeros((2, K)), iterations=value)
    with pytest.raises(ValueError, match="sinkhorn_knopp expects scores of shape"):
        sinkhorn_knopp(np.zeros(K))


@pytest.mark.parametrize(
    ("code_shape", "shape", "message"),
    [
        ((4, K), (4, 2, K), "expects rank-3 inputs"),
        ((4, 2, K), (4, 2 * K), "expects rank-3 inputs"),
        ((4, 2, K), (5, 4, K), "as many rows as scores, or more"),
        ((4, 2, K), (4, 4, K + 1), "same number K of prototypes"),
        ((4, 3, K), (4, 2, K), "at least as many views as code views"),
        ((4, 1, K), (4, 1, K), "and at least 2"),
        ((4, 0, K), (4, 2, K), "at least one code view"),
    ],
)
def test_rejects_inputs_of_the_wrong_shape(code_shape, shape, message):
    with pytest.raises(ValueError, match=message):
        SwAVLoss()(np.ones(code_shape), np.ones(shape))


def test_checks_shapes_a_trace_leaves_unknown_at_run_time():
    loss = SwAVLoss(dtype="float64")
    spec = tf.TensorSpec([None, None, None], tf.float64)
    traced = tf.function(lambda c, s: loss(c, s), input_signature=[spec, spec])
    scores = _scores(3, 4, seed=6)

    np.testing.assert_allclose(
        traced(scores[:, :2], scores).numpy(), loss(scores[:, :2], scores).numpy(), rtol=1e-12
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="V >= max"):
        traced(scores[:, :2], scores[:, :1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="must have one K"):
        traced(scores[:, :2], scores[:, :, :4])


def test_queue_rows_join_the_codes_once_and_get_no_terms():
    # SwAV's queue: earlier rows' scores first in code_scores, in the column sums only.
    scores, queue = _scores(4, 3, seed=7), _scores(6, 2, seed=8)
    code_scores = np.concatenate([queue, scores[:, :2]])
    loss = SwAVLoss(temperature=0.5, reduction="none", dtype="float64")
    terms = loss(code_scores, scores).numpy()

    codes = [reference_sinkhorn(code_scores[:, v], 0.05, 3)[len(queue) :] for v in range(2)]
    expected = []
    for i in range(len(scores)):
        total = 0.0
        for v in range(2):
            for w in range(3):
                if w != v:
                    logits = [scores[i, w, k] / 0.5 for k in range(K)]
                    normaliser = _logsumexp(logits)
                    total -= sum(codes[v][i, k] * (logits[k] - normaliser) for k in range(K))
        expected.append(total / 4)
    np.testing.assert_allclose(terms, expected, rtol=1e-12)
    assert not np.allclose(terms, loss(scores[:, :2], scores).numpy())
