"""MultiShotMemorySampler: balanced batches, pool restrictions, seeds, warm-up, errors, fit."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.datasets import load_data
from tensorflow_similarity.samplers import MultiShotMemorySampler, Sampler, select_examples
from tensorflow_similarity.samplers import multi_shot_memory_sampler as module
from tensorflow_similarity.testing import mirrored_strategy
from tests.samplers.balance import assert_balanced, labelled_set

COUNTS = {0: 9, 1: 6, 2: 8, 3: 5, 4: 7, 5: 6}


def batches(sampler, count):
    return [sampler[i] for i in range(count)]


def assert_same_batches(first, second):
    for (xa, ya), (xb, yb) in zip(first, second, strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


def test_is_a_keras_py_dataset_of_steps_per_epoch_batches():
    x, y = labelled_set(COUNTS)
    sampler = MultiShotMemorySampler(x, y, steps_per_epoch=7, seed=0)
    assert isinstance(sampler, keras.utils.PyDataset)
    assert isinstance(sampler, Sampler)
    assert len(sampler) == 7
    assert sampler.batch_size == 4
    xb, yb = sampler[0]
    assert isinstance(xb, tf.Tensor) and isinstance(yb, tf.Tensor)
    assert yb.dtype == tf.int32


@pytest.mark.parametrize("classes_per_batch, examples_per_class", [(2, 2), (3, 4), (6, 5), (5, 1)])
def test_every_batch_holds_exactly_the_requested_classes_and_counts(
    classes_per_batch, examples_per_class
):
    x, y = labelled_set(COUNTS)
    sampler = MultiShotMemorySampler(
        x,
        y,
        classes_per_batch=classes_per_batch,
        examples_per_class_per_batch=examples_per_class,
        steps_per_epoch=30,
        seed=1,
    )
    seen = set()
    for xb, yb in sampler:
        assert_balanced(xb, yb, classes_per_batch, examples_per_class)
        seen.update(np.asarray(yb).tolist())
    assert seen == set(COUNTS)


def test_class_list_restricts_the_classes():
    x, y = labelled_set(COUNTS)
    sampler = MultiShotMemorySampler(
        x, y, classes_per_batch=2, steps_per_epoch=40, class_list=[4, 1, 4], seed=2
    )
    assert sampler.class_list == [1, 4]
    seen = set()
    for xb, yb in sampler:
        assert_balanced(xb, yb, 2, 2)
        seen.update(np.asarray(yb).tolist())
    assert seen == {1, 4}
    assert sampler.num_examples == COUNTS[1] + COUNTS[4]


def test_total_examples_per_class_limits_the_pool():
    x, y = labelled_set(COUNTS)
    limit = 6
    sampler = MultiShotMemorySampler(
        x,
        y,
        classes_per_batch=3,
        examples_per_class_per_batch=3,
        total_examples_per_class=limit,
        steps_per_epoch=60,
        seed=3,
    )
    pool_x, pool_y = sampler.get_slice()
    assert sampler.num_examples == sum(min(n, limit) for n in COUNTS.values())
    pool_ids = {c: set() for c in COUNTS}
    for row, label in zip(np.asarray(pool_x), np.asarray(pool_y), strict=True):
        assert int(row[0]) not in pool_ids[int(label)], "an example entered the pool twice"
        pool_ids[int(label)].add(int(row[0]))
    for c, n in COUNTS.items():
        assert len(pool_ids[c]) == min(n, limit)
    for xb, yb in sampler:
        assert_balanced(xb, yb, 3, 3)
        for row, label in zip(np.asarray(xb), np.asarray(yb), strict=True):
            assert int(row[0]) in pool_ids[int(label)]
    # The pool is select_examples' selection for the same seed.
    expected_x, expected_y = select_examples(x, y, num_examples_per_class=limit, seed=3)
    np.testing.assert_array_equal(pool_x, expected_x)
    np.testing.assert_array_equal(pool_y, expected_y)


def test_same_seed_same_batches_in_any_order_different_seed_or_epoch_differ():
    x, y = labelled_set(COUNTS)
    first = MultiShotMemorySampler(x, y, classes_per_batch=3, steps_per_epoch=5, seed=7)
    second = MultiShotMemorySampler(x, y, classes_per_batch=3, steps_per_epoch=5, seed=7)
    other = MultiShotMemorySampler(x, y, classes_per_batch=3, steps_per_epoch=5, seed=8)
    epoch0 = batches(first, 5)
    assert_same_batches(epoch0, [second[i] for i in reversed(range(5))][::-1])
    assert not all(
        np.array_equal(a[0], b[0]) for a, b in zip(epoch0, batches(other, 5), strict=True)
    )
    first.on_epoch_end()
    second.on_epoch_end()
    epoch1 = batches(first, 5)
    assert_same_batches(epoch1, batches(second, 5))
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(epoch0, epoch1, strict=True))
    unseeded = [MultiShotMemorySampler(x, y, classes_per_batch=3, steps_per_epoch=5) for _ in "ab"]
    assert not all(
        np.array_equal(a[0], b[0])
        for a, b in zip(batches(unseeded[0], 5), batches(unseeded[1], 5), strict=True)
    )


@pytest.mark.parametrize("warmup, flags", [(2, [True, True, False, False]), (-1, [False] * 4)])
def test_warmup_flag_reaches_the_augmenter(warmup, flags):
    x, y = labelled_set(COUNTS)
    calls = []

    def augmenter(xb, yb, num_augmentations, is_warmup):
        calls.append((num_augmentations, is_warmup))
        return xb * 10.0, yb

    sampler = MultiShotMemorySampler(
        x, y, steps_per_epoch=2, augmenter=augmenter, warmup=warmup, seed=0
    )
    received = []
    for _ in range(4):
        received.append(sampler.is_warmup)
        xb, _ = sampler[0]
        sampler.on_epoch_end()
    assert [flag for _, flag in calls] == flags == received
    assert {n for n, _ in calls} == {1}
    assert np.all(np.asarray(xb)[:, 0] % 10 == 0)  # the augmenter's output is the batch


def test_warmup_flag_reaches_the_augmenter_during_fit():
    x, y = labelled_set(COUNTS)
    flags = []

    def augmenter(xb, yb, num_augmentations, is_warmup):
        flags.append(is_warmup)
        return xb, yb

    sampler = MultiShotMemorySampler(
        x, y, classes_per_batch=2, steps_per_epoch=2, augmenter=augmenter, warmup=1, seed=0
    )
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(6)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    epochs = []

    class RecordFlags(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            flags.clear()  # drops the calls Keras makes to learn the batch signature

        def on_epoch_end(self, epoch, logs=None):
            epochs.append(list(flags))

    model.fit(sampler, epochs=2, verbose=0, callbacks=[RecordFlags()])
    assert sampler.epoch == 2
    assert epochs == [[True, True], [False, False]]
    model.fit(sampler, epochs=1, verbose=0)  # a second fit goes on counting
    assert sampler.epoch == 3


def test_small_class_is_drawn_with_replacement_and_warned_or_refused():
    x, y = labelled_set({0: 2, 1: 8, 2: 8})
    with pytest.warns(UserWarning, match=r"\{0: 2\}"):
        sampler = MultiShotMemorySampler(
            x, y, classes_per_batch=3, examples_per_class_per_batch=4, steps_per_epoch=3, seed=0
        )
    for xb, yb in sampler:
        assert_balanced(xb, yb, 3, 4, distinct=False)
    with pytest.raises(ValueError, match="allow_replacement"):
        MultiShotMemorySampler(
            x, y, classes_per_batch=3, examples_per_class_per_batch=4, allow_replacement=False
        )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        MultiShotMemorySampler(x, y, classes_per_batch=3, examples_per_class_per_batch=2)


def test_labels_of_shape_n_by_1_and_a_loader():
    x, y = labelled_set(COUNTS)
    paths = [f"{int(i)}:{int(c)}" for i, c in x]

    def load(path):
        return np.array([float(v) for v in path.split(":")], np.float32)

    sampler = MultiShotMemorySampler(
        paths, y[:, None], load, classes_per_batch=3, steps_per_epoch=5, seed=0
    )
    for xb, yb in sampler:
        assert yb.shape == (6, 1)
        assert_balanced(xb, yb, 3, 2)
    assert sampler.example_shape == (2,)


def test_get_slice_and_properties():
    x, y = labelled_set(COUNTS)
    sampler = MultiShotMemorySampler(x, y, seed=0)
    whole_x, whole_y = sampler.get_slice()
    assert sampler.num_examples == len(x) == len(whole_x)
    assert sorted(np.asarray(whole_x)[:, 0].tolist()) == list(range(len(x)))
    part_x, part_y = sampler.get_slice(2, 3)
    np.testing.assert_array_equal(part_x, whole_x[2:5])
    np.testing.assert_array_equal(part_y, whole_y[2:5])
    assert sampler.get_slice(len(x) - 1, 10)[0].shape[0] == 1
    assert sampler.example_shape == (2,)
    with pytest.raises(ValueError, match="begin"):
        sampler.get_slice(len(x))


def _fails(*args, **kwargs):
    raise AssertionError("the pool was built before the arguments were checked")


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((np.zeros((5, 2)), np.zeros(4, np.int32)), {}, ValueError, "same length"),
        ((np.zeros((4, 2)), np.array([0.0, 1.0, 0.0, 1.0])), {}, TypeError, "integer"),
        ((np.zeros((4, 2)), np.zeros((4, 2), np.int32)), {}, ValueError, r"\[n, 1\]"),
        ((np.zeros((4, 2)), np.array([0, 1, 0, 1])), {"classes_per_batch": 3}, ValueError, "2 c"),
        ((np.zeros((4, 2)), np.array([0, 1, 0, 1])), {"class_list": [0, 5]}, ValueError, r"\[5\]"),
        ((np.zeros((4, 2)), np.array([0, 1, 0, 1]), 4), {}, TypeError, "by keyword"),
        ((np.zeros((4, 2)), np.array([0, 1, 0, 1])), {"steps_per_epoch": 0}, ValueError, "steps"),
        ((np.zeros((4, 2)), np.array([0, 1, 0, 1])), {"augmenter": 3}, TypeError, "augmenter"),
        ((np.zeros((4, 2)), np.array([0, 1, 0, 1])), {"seed": -1}, ValueError, "seed"),
        (
            (np.zeros((4, 2)), np.array([0, 1, 0, 1])),
            {"examples_per_class_per_batch": 2.0},
            ValueError,
            "examples_per_class_per_batch",
        ),
    ],
)
def test_bad_input_is_refused_before_the_pool_is_built(monkeypatch, args, kwargs, error, match):
    monkeypatch.setattr(module, "selection_indices", _fails)
    with pytest.raises(error, match=match):
        MultiShotMemorySampler(*args, **kwargs)


def test_fit_under_a_two_replica_strategy_splits_each_batch():
    x, y = labelled_set(COUNTS)
    sampler = MultiShotMemorySampler(
        x, y, classes_per_batch=4, examples_per_class_per_batch=2, steps_per_epoch=4, seed=0
    )

    def replica_batch(y_true, y_pred):
        size = tf.cast(tf.shape(y_true)[0], tf.float32)
        return tf.fill(tf.shape(y_true)[:1], size)

    with mirrored_strategy(2).scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(6)])
        model.compile(
            keras.optimizers.SGD(0.01),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[keras.metrics.MeanMetricWrapper(replica_batch, name="replica_batch")],
        )
    history = model.fit(sampler, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    # Each replica saw half of the 8-example sampler batch.
    assert history.history["replica_batch"][0] == pytest.approx(4.0)


def test_digits_batches_and_fit():
    data = load_data("digits", 8)
    sampler = MultiShotMemorySampler(
        data.x_train,
        data.y_train,
        classes_per_batch=4,
        examples_per_class_per_batch=4,
        steps_per_epoch=3,
        seed=0,
    )
    assert sampler.class_list == list(range(10))
    for xb, yb in sampler:
        assert xb.shape == (16, 8, 8, 3)
        counts = np.unique(np.asarray(yb), return_counts=True)[1]
        assert counts.tolist() == [4, 4, 4, 4]
    model = keras.Sequential(
        [keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(10)]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(sampler, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
