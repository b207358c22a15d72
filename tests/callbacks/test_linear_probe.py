"""OnlineLinearProbe: it learns, it leaves the self-supervised training bit for bit alone."""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.callbacks import OnlineLinearProbe
from tensorflow_similarity.testing import mirrored_strategy
from tests.models.contrastive_fixtures import IMAGE_SHAPE, tiny_model, views


def separable(num, num_classes=4, dim=6, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, num)
    features = 6.0 * np.eye(num_classes, dim)[labels] + 0.5 * rng.uniform(-1, 1, (num, dim))
    return features.astype("float32"), labels


def labelled_images(num, seed):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(num, *IMAGE_SHAPE)).astype("float32"), rng.integers(0, 3, num)


def fit_three_steps(initial, probe, num_replicas):
    scope = (
        mirrored_strategy(num_replicas).scope() if num_replicas > 1 else contextlib.nullcontext()
    )
    with scope:
        model = tiny_model("simclr", sync_bn=num_replicas > 1)
        model.set_weights(initial)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5, momentum=0.9))
    data = tf.data.Dataset.from_tensors(views())
    callbacks = [probe] if probe is not None else []
    history = model.fit(data, epochs=3, verbose=0, callbacks=callbacks).history
    return model, history


@pytest.mark.parametrize("num_replicas", [1, 2])
def test_the_probe_leaves_the_backbone_bit_for_bit_unchanged(num_replicas):
    """Three steps (one an epoch, the probe after each) with and without the probe."""
    initial = tiny_model("simclr", sync_bn=num_replicas > 1).get_weights()
    without, plain = fit_three_steps(initial, None, num_replicas)
    probe = OnlineLinearProbe(labelled_images(24, 1), labelled_images(12, 2), batch_size=8)
    with_probe, probed = fit_three_steps(initial, probe, num_replicas)
    assert len(probed["linear_probe_accuracy"]) == 3 and probe.evaluations == 3
    assert probed["loss"] == plain["loss"]
    for a, b in ((without.backbone, with_probe.backbone), (without, with_probe)):
        assert len(a.weights) == len(b.weights) > 0
        for x, y in zip(a.weights, b.weights, strict=True):
            assert x.numpy().tobytes() == y.numpy().tobytes(), x.path
    # The steps did move the backbone, so the comparison is not between two untrained ones.
    assert any(
        not np.array_equal(w.numpy(), v) for w, v in zip(without.weights, initial, strict=True)
    )


def test_the_head_learns_and_carries_over_between_evaluations():
    train, train_labels = separable(120, seed=0)
    test, test_labels = separable(40, seed=1)
    probe = OnlineLinearProbe(
        (train, train_labels), (test, test_labels), embedding_fn=lambda x: x, head_epochs=3
    )
    assert probe.evaluate() == 1.0
    first = probe.kernel.copy()
    assert probe.evaluate() == 1.0
    assert probe.evaluations == 2 and not np.array_equal(probe.kernel, first)
    # Validation labels that are not training classes count as errors.
    unknown = np.where(np.arange(40) < 10, 7, test_labels)
    probe.validation_data = (test, unknown)
    assert probe.evaluate() == pytest.approx(0.75)


def test_a_dataset_gives_what_arrays_give():
    train, train_labels = separable(50, seed=0)
    test, test_labels = separable(20, seed=1)
    noisy = train + np.random.default_rng(3).normal(size=train.shape).astype("float32") * 2
    arrays = OnlineLinearProbe(
        (noisy, train_labels), (test, test_labels), embedding_fn=lambda x: x, batch_size=16
    )
    datasets = OnlineLinearProbe(
        tf.data.Dataset.from_tensor_slices((noisy, train_labels)).batch(16),
        tf.data.Dataset.from_tensor_slices((test, test_labels)).batch(7),
        embedding_fn=lambda x: x,
        batch_size=16,
    )
    for _ in range(2):
        assert arrays.evaluate() == datasets.evaluate()
    np.testing.assert_array_equal(arrays.kernel, datasets.kernel)


@pytest.mark.parametrize("nest", ["dict", "tuple"])
def test_nested_inputs_reach_a_callable_as_they_reach_a_model(nest):
    train, train_labels = separable(50, seed=0)
    test, test_labels = separable(20, seed=1)
    halves = {
        "dict": (
            lambda a: {"left": a[:, :3], "right": a[:, 3:]},
            lambda d: (d["left"], d["right"]),
        ),
        "tuple": (lambda a: (a[:, :3], a[:, 3:]), lambda t: t),
    }
    split, parts = halves[nest]
    plain = OnlineLinearProbe(
        (train, train_labels), (test, test_labels), embedding_fn=lambda x: x, batch_size=16
    )
    nested = OnlineLinearProbe(
        (split(train), train_labels),
        (split(test), test_labels),
        embedding_fn=lambda x: np.concatenate(parts(x), axis=1),
        batch_size=16,
    )
    assert nested.evaluate() == plain.evaluate()
    np.testing.assert_array_equal(nested.kernel, plain.kernel)


def test_every_n_epochs_and_the_log_key():
    x, y = separable(32, seed=0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(6)])
    model.compile("sgd", "mse")
    probe = OnlineLinearProbe((x, y), (x, y), every_n_epochs=2, name="probe")
    history = model.fit(x, x, epochs=4, verbose=0, callbacks=[probe]).history
    assert len(history["probe"]) == 2 and probe.evaluations == 2


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(train_data=np.zeros((4, 2))), "train_data must be a tuple"),
        (dict(train_data=(np.zeros((4, 2)), np.arange(3))), "same number of examples"),
        (dict(train_data=(np.zeros((4, 2)), np.zeros(4, int))), "at least 2"),
        (dict(validation_data=(np.zeros((2, 2)), np.array([0.5, 1.0]))), "integers"),
        (dict(validation_data=(np.zeros((0, 2)), np.zeros(0, int))), "empty"),
        (dict(validation_data=tf.data.Dataset.range(3)), "dataset of \\(x, y\\) batches"),
        (dict(embedding_fn="backbone"), "embedding_fn"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(head_epochs=0), "head_epochs"),
        (dict(batch_size=0), "batch_size"),
        (dict(momentum=1.0), "momentum"),
        (dict(weight_decay=-0.1), "weight_decay"),
        (dict(every_n_epochs=0), "every_n_epochs"),
        (dict(seed=-1), "seed"),
        (dict(name=""), "name"),
    ],
)
def test_bad_input_raises(change, message):
    arguments = dict(
        train_data=(np.zeros((4, 2)), np.array([0, 1, 0, 1])),
        validation_data=(np.zeros((2, 2)), np.array([0, 1])),
    )
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        OnlineLinearProbe(**arguments)


def test_errors_at_evaluation():
    x, y = separable(8, num_classes=2, seed=0)
    with pytest.raises(ValueError, match="no network to embed with"):
        OnlineLinearProbe((x, y), (x, y)).evaluate()
    one_class = tf.data.Dataset.from_tensor_slices((x, np.zeros(8, int))).batch(4)
    with pytest.raises(ValueError, match="at least 2"):
        OnlineLinearProbe(one_class, (x, y), embedding_fn=lambda a: a).evaluate()
    with pytest.raises(ValueError, match="one tensor"):
        OnlineLinearProbe((x, y), (x, y), embedding_fn=lambda a: (a, a)).evaluate()
    probe = OnlineLinearProbe((x, y), (x, y), embedding_fn=lambda a: a)
    probe.evaluate()
    probe.embedding_fn = lambda a: a[:, :3]
    with pytest.raises(ValueError, match="made for 6"):
        probe.evaluate()


def test_huge_features_are_probed_as_unit_ones():
    train, train_labels = separable(120, seed=0)
    test, test_labels = separable(40, seed=1)

    def probe(scale):
        embed = lambda x: x.astype("float64") * scale  # noqa: E731
        data = (train, train_labels), (test, test_labels)
        return OnlineLinearProbe(*data, embedding_fn=embed, head_epochs=3).evaluate()

    assert probe(1.0) == 1.0
    with np.errstate(over="raise", invalid="raise"):
        assert probe(1e300) == 1.0
