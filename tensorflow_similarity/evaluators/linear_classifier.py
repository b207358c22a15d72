"""The linear classifier of the probes: fitting, scoring, standardising, splitting.

`evaluators.linear_probe` (offline) and `callbacks.OnlineLinearProbe` (online)
train and score their linear heads with these.
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

# Rows scored at a time, so the logits stay `_CHUNK x num_classes` however many examples there are.
_CHUNK = 4096


def fit_linear_classifier(
    features: np.ndarray,
    classes: np.ndarray,
    *,
    num_classes: int,
    learning_rate: float,
    epochs: int,
    batch_size: int = 256,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    seed: int = 0,
    initial: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Trains a softmax regression with momentum SGD and a cosine-decayed learning rate.

    Minimises the mean cross-entropy of `softmax(features @ kernel + bias)`
    plus `weight_decay / 2 * ||kernel||^2` over `epochs` passes of seeded,
    shuffled mini-batches; the learning rate falls from `learning_rate` to 0
    by a cosine over all steps. Runs as one TensorFlow graph, with stateless
    random ops only, so it draws nothing from Keras' or TensorFlow's global
    random state.

    Args:
        features: `[num_examples, dim]` float features (standardised by the
            caller).
        classes: `[num_examples]` class indices in `[0, num_classes)`.
        num_classes: Number of classes.
        learning_rate: Initial learning rate.
        epochs: Passes over the features.
        batch_size: Examples per step. Defaults to `256`.
        momentum: Momentum. Defaults to `0.9`.
        weight_decay: L2 penalty on the kernel. Defaults to `0.0`.
        seed: Seed of the shuffling. Defaults to `0`.
        initial: `(kernel, bias)` to start from, or `None` (default) for zeros.

    Returns:
        `(kernel, bias)`: float32 arrays `[dim, num_classes]` and
        `[num_classes]`.
    """
    features = tf.constant(features, tf.float32)
    if initial is None:
        kernel = tf.zeros([features.shape[1], num_classes], tf.float32)
        bias = tf.zeros([num_classes], tf.float32)
    else:
        kernel, bias = (tf.constant(value, tf.float32) for value in initial)
    kernel, bias = _sgd(
        features,
        tf.constant(classes, tf.int32),
        kernel,
        bias,
        tf.constant(learning_rate, tf.float32),
        tf.constant(epochs, tf.int32),
        tf.constant(batch_size, tf.int32),
        tf.constant(momentum, tf.float32),
        tf.constant(weight_decay, tf.float32),
        tf.constant(seed, tf.int32),
    )
    return kernel.numpy(), bias.numpy()


@tf.function(reduce_retracing=True)
def _sgd(features, classes, kernel, bias, learning_rate, epochs, batch_size, momentum, decay, seed):
    num_examples = tf.shape(features)[0]
    num_classes = tf.shape(kernel)[1]
    steps_per_epoch = (num_examples + batch_size - 1) // batch_size
    total_steps = tf.cast(epochs * steps_per_epoch, tf.float32)
    kernel_velocity = tf.zeros_like(kernel)
    bias_velocity = tf.zeros_like(bias)
    step = tf.constant(0.0)
    for epoch in tf.range(epochs):
        order = tf.argsort(tf.random.stateless_uniform([num_examples], tf.stack([seed, epoch])))
        for batch in tf.range(steps_per_epoch):
            index = order[batch * batch_size : tf.minimum((batch + 1) * batch_size, num_examples)]
            x = tf.gather(features, index)
            # d(mean cross-entropy)/d(logits) = (softmax - one-hot) / batch.
            error = tf.nn.softmax(tf.matmul(x, kernel) + bias) - tf.one_hot(
                tf.gather(classes, index), num_classes
            )
            error = error / tf.cast(tf.shape(x)[0], tf.float32)
            kernel_velocity = momentum * kernel_velocity + (
                tf.matmul(x, error, transpose_a=True) + decay * kernel
            )
            bias_velocity = momentum * bias_velocity + tf.reduce_sum(error, axis=0)
            rate = learning_rate * 0.5 * (1.0 + tf.cos(math.pi * step / total_steps))
            kernel = kernel - rate * kernel_velocity
            bias = bias - rate * bias_velocity
            step = step + 1.0
    return kernel, bias


def top_k_accuracy(
    features: np.ndarray, classes: np.ndarray, kernel: np.ndarray, bias: np.ndarray, k: int
) -> float:
    """Fraction of rows whose class is among the `k` highest logits `features @ kernel + bias`.

    A class ties with the logits equal to its own only if fewer than `k`
    logits are strictly higher. A class index of `-1` (unknown) and a
    classifier with non-finite weights count as errors.

    Args:
        features: `[num_examples, dim]` features.
        classes: `[num_examples]` class indices, `-1` for a class the
            classifier does not know.
        kernel: `[dim, num_classes]` weights.
        bias: `[num_classes]` biases.
        k: How many of the highest logits count.

    Returns:
        The accuracy, a Python float in `[0, 1]`.
    """
    if not (np.all(np.isfinite(kernel)) and np.all(np.isfinite(bias))):
        return 0.0
    correct = 0
    for start in range(0, len(features), _CHUNK):
        logits = features[start : start + _CHUNK] @ kernel + bias
        chunk = classes[start : start + _CHUNK]
        own = np.take_along_axis(logits, np.maximum(chunk, 0)[:, None], axis=1)
        rank = np.sum(logits > own, axis=1)
        correct += int(np.sum((rank < k) & (chunk >= 0) & np.isfinite(own[:, 0])))
    return correct / len(features)


def standardise(fit: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays standardised with `fit`'s per-feature mean and standard deviation.

    A feature constant over `fit` is only centred. The statistics are taken
    in float64 on the features divided by their largest magnitude over
    `fit`, so they cannot overflow however large the features are: features
    scaled by any positive factor (1e300 included) standardise alike. The
    results are float32, the classifier's dtype.

    Args:
        fit: `[num_fit, dim]` features whose statistics are used.
        other: `[num_other, dim]` features standardised with them.

    Returns:
        `(fit, other)` standardised, float32.

    Raises:
        ValueError: When a standardised value of `other` lies beyond float32's
            range (a feature more than ~3e38 of `fit`'s standard deviations
            from its mean), which the classifier could only turn into an
            infinite or NaN score.
    """
    fit = np.asarray(fit, np.float64)
    other = np.asarray(other, np.float64)
    scale = np.max(np.abs(fit), axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    fit, other = fit / scale, other / scale
    mean = fit.mean(axis=0)
    std = fit.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    fit, other = (fit - mean) / std, (other - mean) / std
    limit = np.finfo(np.float32).max
    beyond = ~(np.abs(other) <= limit)
    if beyond.any():
        row, column = np.argwhere(beyond)[0]
        raise ValueError(
            f"linear_probe: feature {column} of scored example {row} lies "
            f"{abs(other[row, column]):.3g} standard deviations from the mean of the "
            "examples the classifier is trained on, beyond float32's range. Check the "
            "features (a backbone that diverged, or train and test features of different "
            "scales)."
        )
    return fit.astype(np.float32), other.astype(np.float32)


def class_indices(classes: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Each label's index in the sorted `classes`, `-1` for a label not among them."""
    position = np.clip(np.searchsorted(classes, labels), 0, len(classes) - 1)
    return np.where(classes[position] == labels, position, -1)


def stratified_split(
    classes: np.ndarray, fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Indices `(fit, held_out)`: `floor(fraction * count)` of each class held out, seeded."""
    rng = np.random.default_rng(seed)
    held_out = []
    for label in np.unique(classes):
        members = rng.permutation(np.flatnonzero(classes == label))
        held_out.append(members[: int(fraction * len(members))])
    held_out = np.sort(np.concatenate(held_out))
    fit = np.setdiff1d(np.arange(len(classes)), held_out)
    if len(held_out) == 0 or len(np.unique(classes[fit])) < 2:
        raise ValueError(
            f"linear_probe: validation_fraction={fraction} of {len(classes)} training examples "
            "leaves no held-out part, or fewer than 2 classes to fit on. Use more training "
            "examples or a larger validation_fraction."
        )
    return fit, held_out
