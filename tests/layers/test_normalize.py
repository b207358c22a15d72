"""`normalize`, SyncBatchNormalization's last step: values and all five gradients."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.layers.sync_moments import normalize

EPSILON = 1e-3


def numpy_reference(x, mean, variance, offset, scale, upstream, axis):
    """float64 value of y and gradients of sum(y * upstream), written out per channel."""
    x = np.moveaxis(x.astype("float64"), axis, -1).reshape(-1, x.shape[axis])
    upstream = np.moveaxis(upstream.astype("float64"), axis, -1).reshape(x.shape)
    y = np.empty_like(x)
    grads = {name: np.zeros(x.shape[1]) for name in ("mean", "variance", "offset", "scale")}
    dx = np.empty_like(x)
    for c in range(x.shape[1]):
        std = np.sqrt(variance[c] + EPSILON)
        for i in range(x.shape[0]):
            x_hat = (x[i, c] - mean[c]) / std
            y[i, c] = scale[c] * x_hat + offset[c]
            dx[i, c] = upstream[i, c] * scale[c] / std
            grads["mean"][c] -= upstream[i, c] * scale[c] / std
            grads["variance"][c] -= 0.5 * upstream[i, c] * scale[c] * x_hat / std**2
            grads["offset"][c] += upstream[i, c]
            grads["scale"][c] += upstream[i, c] * x_hat
    return y, dx, grads


def traced_ops(fn, *args) -> set[str]:
    graph = tf.function(fn).get_concrete_function(*args).graph
    return {op.type for op in graph.get_operations()}


@pytest.mark.parametrize(
    "shape, axis, dtype, fused",
    [
        ((3, 4, 5, 6), 3, "float32", True),
        ((7, 5), 1, "float32", True),
        ((2, 3, 4, 2, 5), 4, "float32", True),
        ((3, 4, 5, 6), 1, "float32", False),
        ((3, 4, 5, 6), 3, "float64", False),
    ],
)
def test_matches_float64_formula(shape, axis, dtype, fused):
    rng = np.random.default_rng(0)
    channels = shape[axis]
    x = rng.normal(2.0, 3.0, shape)
    upstream = rng.normal(size=shape)
    stats = {
        "mean": rng.normal(size=channels),
        "variance": rng.uniform(0.2, 2.0, channels),
        "offset": rng.normal(size=channels),
        "scale": rng.uniform(0.5, 1.5, channels),
    }
    tensors = {name: tf.constant(value, dtype) for name, value in stats.items()}
    x_tensor = tf.constant(x, dtype)

    def step(x_tensor, mean, variance, offset, scale):
        with tf.GradientTape() as tape:
            tape.watch([x_tensor, mean, variance, offset, scale])
            y = normalize(x_tensor, mean, variance, offset, scale, EPSILON, axis)
            loss = tf.reduce_sum(y * tf.constant(upstream, dtype))
        return y, tape.gradient(loss, [x_tensor, mean, variance, offset, scale])

    args = (x_tensor, *(tensors[k] for k in ("mean", "variance", "offset", "scale")))
    y, (dx, *grads) = step(*args)
    expected_y, expected_dx, expected = numpy_reference(
        x, *(stats[k] for k in ("mean", "variance", "offset", "scale")), upstream, axis
    )

    def flat(t):
        return np.moveaxis(t.numpy(), axis, -1).reshape(-1, channels)

    tolerance = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(flat(y), expected_y, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(flat(dx), expected_dx, rtol=tolerance, atol=tolerance)
    for name, grad in zip(("mean", "variance", "offset", "scale"), grads, strict=True):
        np.testing.assert_allclose(grad.numpy(), expected[name], rtol=1e-4, atol=tolerance)
    assert ("FusedBatchNormV3" in traced_ops(step, *args)) == fused


def test_missing_offset_and_scale_are_zero_and_one():
    x = tf.random.stateless_normal((4, 3, 3, 2), seed=(1, 2))
    mean, variance = tf.constant([0.5, -1.0]), tf.constant([2.0, 0.5])
    expected = (x - mean) / tf.sqrt(variance + EPSILON)
    np.testing.assert_allclose(
        normalize(x, mean, variance, None, None, EPSILON, 3).numpy(), expected.numpy(), atol=1e-6
    )
