"""The offline linear probe: its protocol on data whose answer is known, leakage, bad input."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.evaluators import (
    LinearProbeResult,
    linear_probe,
    linear_probe_on_features,
)
from tensorflow_similarity.evaluators.linear_probe import fit_linear_classifier, top_k_accuracy

FAST = dict(epochs=15, learning_rates=(0.01, 0.1, 1.0))


def separable(num, num_classes=10, dim=16, seed=0):
    """Class centres 6 apart on the axes plus unit-scale noise: a linear map separates them."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, num)
    features = 6.0 * np.eye(num_classes, dim)[labels] + 0.5 * rng.uniform(-1, 1, (num, dim))
    return features.astype("float32"), labels


def noisy(num, num_classes=4, dim=8, seed=0):
    """Overlapping classes, so the learning rates give different held-out accuracies."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, num)
    features = np.eye(num_classes, dim)[labels] + 1.5 * rng.normal(size=(num, dim))
    return features.astype("float32"), labels


def test_separable_features_reach_100_percent():
    train, train_labels = separable(400, seed=0)
    test, test_labels = separable(200, seed=1)
    result = linear_probe_on_features(train, train_labels, test, test_labels, **FAST)
    assert isinstance(result, LinearProbeResult)
    assert result.top1_accuracy == 1.0 and result.top_k_accuracy == 1.0
    assert result.top_k == 5 and result.num_classes == 10
    assert result.learning_rate in FAST["learning_rates"]
    assert set(result.validation_accuracy) == set(FAST["learning_rates"])


def test_random_labels_stay_at_chance():
    # Test labels drawn independently of everything the classifier saw: the number it gets
    # right is exactly Binomial(n, 1/C) whatever it learnt, so 5 standard deviations bound it
    # (a false failure has probability below 1e-6).
    num_classes, num_test = 10, 2000
    rng = np.random.default_rng(3)
    train = rng.normal(size=(500, 20)).astype("float32")
    test = rng.normal(size=(num_test, 20)).astype("float32")
    result = linear_probe_on_features(
        train,
        rng.integers(0, num_classes, 500),
        test,
        rng.integers(0, num_classes, num_test),
        **FAST,
    )
    for accuracy, p in ((result.top1_accuracy, 0.1), (result.top_k_accuracy, 0.5)):
        sigma = math.sqrt(p * (1 - p) / num_test)
        assert abs(accuracy - p) < 5 * sigma


def test_test_split_never_chooses_the_learning_rate():
    train, train_labels = noisy(300, seed=0)
    test, test_labels = noisy(100, seed=1)
    probe = dict(FAST, top_k=2)
    first = linear_probe_on_features(train, train_labels, test, test_labels, **probe)
    assert len(set(first.validation_accuracy.values())) > 1  # the choice is not a tie
    rng = np.random.default_rng(7)
    other = linear_probe_on_features(
        train,
        train_labels,
        rng.normal(size=test.shape).astype("float32"),
        rng.permutation(test_labels[::-1]),
        **probe,
    )
    assert other.learning_rate == first.learning_rate
    assert other.validation_accuracy == first.validation_accuracy
    relabelled = linear_probe_on_features(train, train_labels, test, (test_labels + 1) % 4, **probe)
    assert relabelled.learning_rate == first.learning_rate
    assert relabelled.top1_accuracy != first.top1_accuracy


def test_same_seed_same_result_and_unknown_test_classes_are_errors():
    train, train_labels = separable(200, num_classes=4, seed=0)
    test, test_labels = separable(40, num_classes=4, seed=1)
    probe = dict(FAST, top_k=2)
    first = linear_probe_on_features(train, train_labels, test, test_labels, **probe)
    assert first == linear_probe_on_features(train, train_labels, test, test_labels, **probe)
    unknown = np.where(np.arange(40) < 10, 9, test_labels)
    result = linear_probe_on_features(train, train_labels, test, unknown, **probe)
    assert result.top1_accuracy == pytest.approx(0.75) and result.top_k_accuracy == 0.75


def test_fit_linear_classifier_matches_numpy_sgd():
    """Momentum SGD on the softmax regression, written out with loops in float64."""
    rng = np.random.default_rng(0)
    features, classes = rng.normal(size=(10, 3)), rng.integers(0, 3, 10)
    lr, epochs, batch, momentum, decay, seed = 0.5, 3, 4, 0.9, 0.01, 5
    kernel, bias = fit_linear_classifier(
        features,
        classes,
        num_classes=3,
        learning_rate=lr,
        epochs=epochs,
        batch_size=batch,
        momentum=momentum,
        weight_decay=decay,
        seed=seed,
    )
    w, b = np.zeros((3, 3)), np.zeros(3)
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    total, step = epochs * 3, 0
    for epoch in range(epochs):
        order = np.argsort(tf.random.stateless_uniform([10], [seed, epoch]).numpy(), kind="stable")
        for start in range(0, 10, batch):
            index = order[start : start + batch]
            gw, gb = decay * w, np.zeros(3)
            for i in index:
                logits = features[i] @ w + b
                p = np.exp(logits - logits.max())
                p /= p.sum()
                p[classes[i]] -= 1
                gw += np.outer(features[i], p) / len(index)
                gb += p / len(index)
            vw, vb = momentum * vw + gw, momentum * vb + gb
            rate = lr * 0.5 * (1 + math.cos(math.pi * step / total))
            w, b, step = w - rate * vw, b - rate * vb, step + 1
    np.testing.assert_allclose(kernel, w, atol=1e-5)
    np.testing.assert_allclose(bias, b, atol=1e-5)


def test_top_k_accuracy_counts_ties_and_divergence():
    kernel, bias = np.eye(3), np.zeros(3)
    features = np.array([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [3.0, 2.0, 1.0]])
    classes = np.array([1, 2, 0])
    assert top_k_accuracy(features, classes, kernel, bias, k=1) == 1.0  # a tie counts
    assert top_k_accuracy(features, np.array([2, 0, 2]), kernel, bias, k=1) == 0.0
    assert top_k_accuracy(features, np.array([2, 0, 2]), kernel, bias, k=2) == pytest.approx(1 / 3)
    assert top_k_accuracy(features, classes, kernel * np.nan, bias, k=3) == 0.0


def test_backbone_runs_in_inference_mode():
    """A batch norm backbone: the probe sees its moving statistics, not the batch's."""
    backbone = keras.Sequential([keras.Input((6,)), keras.layers.BatchNormalization()])
    norm = backbone.layers[0]
    norm.moving_mean.assign(np.full(6, 3.0, "float32"))
    norm.moving_variance.assign(np.full(6, 4.0, "float32"))
    train, train_labels = separable(120, num_classes=3, dim=6, seed=0)
    test, test_labels = separable(30, num_classes=3, dim=6, seed=1)
    probe = dict(FAST, top_k=2)
    result = linear_probe(backbone, train, train_labels, test, test_labels, batch_size=32, **probe)
    expected = linear_probe_on_features(
        backbone(train, training=False),
        train_labels,
        backbone(test, training=False),
        test_labels,
        **probe,
    )
    assert result == expected
    # A plain callable is called as is, batch by batch, and its outputs flattened.
    calls = []

    def embed(x):
        calls.append(len(x))
        return np.asarray(x).reshape(len(x), 2, 3)

    flat = linear_probe(embed, train, train_labels, test, test_labels, batch_size=50, **probe)
    assert calls == [50, 50, 20, 30]
    assert flat.top1_accuracy == 1.0


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(train_labels=np.zeros(9, int)), "train_labels has 9 labels for 10 examples"),
        (dict(test_labels=np.arange(5)), "test_labels has 5 labels for 4 examples"),
        (dict(train_labels=np.zeros(10, int)), "at least 2"),
        (dict(train_labels=np.arange(10) % 3), "top_k=5 exceeds the 3 training classes"),
        (dict(train_labels=np.linspace(0, 1, 10)), "integer class labels"),
        (dict(learning_rates=()), "learning_rates"),
        (dict(learning_rates=(0.1, -1.0)), "learning_rates"),
        (dict(epochs=0), "epochs"),
        (dict(momentum=1.0), "momentum"),
        (dict(validation_fraction=0.0), "validation_fraction"),
        (dict(weight_decay=-1.0), "weight_decay"),
        (dict(top_k=0), "top_k"),
        (dict(batch_size=0), "batch_size"),
        (dict(test_images=[[0.0]] * 4), "test_images must be an array"),
    ],
)
def test_bad_input_raises_before_the_backbone_runs(change, message):
    calls = []

    def backbone(x):
        calls.append(x)
        return x

    arguments = dict(
        train_images=np.zeros((10, 3), "float32"),
        train_labels=np.arange(10) % 6,
        test_images=np.zeros((4, 3), "float32"),
        test_labels=np.arange(4),
    )
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        linear_probe(backbone, **arguments)
    assert calls == []


def test_bad_features_and_backbones():
    train, labels = separable(20, num_classes=2, dim=4)
    with pytest.raises(ValueError, match="backbone must be a Keras model or a callable"):
        linear_probe("resnet", train, labels, train, labels, top_k=2)
    with pytest.raises(ValueError, match="same dimension"):
        linear_probe_on_features(train, labels, train[:, :3], labels, top_k=2)
    with pytest.raises(ValueError, match="finite"):
        linear_probe_on_features(train * np.nan, labels, train, labels, top_k=2)
    with pytest.raises(ValueError, match="no held-out part"):
        linear_probe_on_features(train[:3], np.array([0, 1, 1]), train, labels, top_k=2)
    with pytest.raises(ValueError, match="one tensor"):
        linear_probe(lambda x: (x, x), train, labels, train, labels, top_k=2)


@pytest.mark.parametrize("factor", [1e300, 1e-300])
def test_huge_and_tiny_features_give_the_accuracy_of_unit_ones(factor):
    train, train_labels = separable(120, num_classes=4, dim=8, seed=0)
    test, test_labels = separable(60, num_classes=4, dim=8, seed=1)
    train, test = train.astype("float64"), test.astype("float64")
    protocol = dict(epochs=5, learning_rates=(0.03, 0.3), top_k=2)

    unit = linear_probe_on_features(train, train_labels, test, test_labels, **protocol)
    with np.errstate(over="raise", invalid="raise"):  # Not even a warning of overflow.
        scaled = linear_probe_on_features(
            train * factor, train_labels, test * factor, test_labels, **protocol
        )

    # Far above the chance of 4 classes, so that the comparison means something.
    assert unit.top1_accuracy > 0.9
    assert scaled == unit


def test_scored_features_beyond_float32_after_standardising_are_an_error():
    train, train_labels = noisy(40, seed=0)
    test, test_labels = noisy(20, seed=1)
    test = test.astype("float64")
    test[3, 5] = 1e300

    with pytest.raises(ValueError, match="feature 5 of scored example 3 lies .* beyond float32"):
        linear_probe_on_features(train, train_labels, test, test_labels, epochs=1, top_k=2)
