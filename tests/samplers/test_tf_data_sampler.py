"""TFDataSampler: exact class balance, restrictions, seeds, warm-up, label_output, errors, fit."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.samplers import TFDataSampler
from tensorflow_similarity.testing import mirrored_strategy
from tests.samplers.balance import assert_balanced, labelled_set

# Seven classes: a batch of 3 classes does not divide them (0.18 repeated a class then).
COUNTS = {0: 6, 1: 9, 2: 5, 3: 7, 4: 6, 5: 8, 6: 5}


def dataset(counts=COUNTS):
    x, y = labelled_set(counts)
    return tf.data.Dataset.from_tensor_slices((x, y)), x, y


def take(batches, count):
    return [(np.asarray(x), tf.nest.map_structure(np.asarray, y)) for x, y in batches.take(count)]


@pytest.mark.parametrize("classes_per_batch, examples_per_class", [(3, 2), (2, 5), (7, 1)])
def test_every_batch_holds_exactly_the_requested_classes_and_counts(
    classes_per_batch, examples_per_class
):
    ds, _, _ = dataset()
    batches = TFDataSampler(ds, classes_per_batch, examples_per_class, seed=0)
    seen = set()
    for xb, yb in take(batches, 25):
        assert_balanced(xb, yb, classes_per_batch, examples_per_class)
        seen.update(yb.tolist())
    assert seen == set(COUNTS)


def test_class_list_and_total_examples_per_class():
    ds, x, y = dataset()
    batches = TFDataSampler(ds, 2, 3, class_list=[5, 1], total_examples_per_class=4, seed=1)
    first_ids = {c: [int(i) for i, label in x if label == c][:4] for c in (1, 5)}
    used = {1: set(), 5: set()}
    for xb, yb in take(batches, 12):
        assert_balanced(xb, yb, 2, 3)
        for row in xb:
            used[int(row[1])].add(int(row[0]))
    for c in (1, 5):
        assert used[c] == set(first_ids[c])


def test_same_seed_same_batches_different_seed_differs():
    ds, _, _ = dataset()
    a, b, c = (take(TFDataSampler(ds, 3, 2, seed=s), 6) for s in (2, 2, 3))
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert any(not np.array_equal(xa, xc) for (xa, _), (xc, _) in zip(a, c, strict=True))


def test_load_fn_then_augmenter_after_warmup_examples():
    ds, _, _ = dataset()

    def load(x, y):
        return x * tf.constant([1.0, 1.0]), y

    def augmenter(x, y):
        return x + tf.constant([0.5, 0.0]), y

    batches = TFDataSampler(ds, 2, 2, augmenter=augmenter, load_fn=load, warmup=6, seed=0)
    rows = np.concatenate([xb for xb, _ in take(batches, 3)])
    fractions = rows[:, 0] % 1
    assert fractions.tolist() == [0.0] * 6 + [0.5] * 6
    for xb, yb in take(batches, 3):
        assert_balanced(np.floor(xb), yb, 2, 2)


@pytest.mark.parametrize("label_output", [1, "class"])
def test_label_output_locates_the_class_id(label_output):
    x, y = labelled_set(COUNTS)
    if label_output == 1:
        targets = (np.zeros(len(y)), y)
    else:
        targets = {"class": y, "other": np.zeros(len(y))}
    ds = tf.data.Dataset.from_tensor_slices((x, targets))
    for xb, yb in take(TFDataSampler(ds, 3, 2, label_output=label_output, seed=0), 5):
        assert_balanced(xb, yb[label_output], 3, 2)


def test_small_class_warns_or_is_refused():
    ds, _, _ = dataset({0: 2, 1: 6, 2: 6})
    with pytest.warns(UserWarning, match=r"\{0: 2\}"):
        batches = TFDataSampler(ds, 3, 3, seed=0)
    for xb, yb in take(batches, 3):
        assert_balanced(xb, yb, 3, 3, distinct=False)
    with pytest.raises(ValueError, match="allow_replacement"):
        TFDataSampler(ds, 3, 3, allow_replacement=False)


@pytest.mark.parametrize(
    "make, kwargs, error, match",
    [
        (lambda ds: ds.repeat(), {}, ValueError, "infinite"),
        (lambda ds: ds.map(lambda x, y: (x, tf.cast(y, tf.float32))), {}, TypeError, "integer"),
        (lambda ds: ds.map(lambda x, y: x), {}, ValueError, "tuples"),
        (lambda ds: ds, {"classes_per_batch": 8}, ValueError, "7 classes"),
        (lambda ds: ds, {"class_list": [9]}, ValueError, r"\[9\]"),
        (lambda ds: ds, {"label_output": 0}, ValueError, "label_output"),
        (lambda ds: ds.take(0), {}, ValueError, "empty"),
        (lambda ds: ds, {"augmenter": "flip"}, TypeError, "augmenter"),
        (lambda ds: np.zeros(3), {}, TypeError, "tf.data.Dataset"),
    ],
)
def test_bad_input_is_refused(make, kwargs, error, match):
    ds, _, _ = dataset()
    with pytest.raises(error, match=match):
        TFDataSampler(make(ds), **kwargs)


def test_fit_under_a_two_replica_strategy():
    ds, _, _ = dataset()
    batches = TFDataSampler(ds, 4, 2, seed=0)
    with mirrored_strategy(2).scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(7)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(batches, epochs=1, steps_per_epoch=3, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])
