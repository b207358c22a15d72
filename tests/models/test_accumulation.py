"""`accumulation_steps`: which batches an epoch trains on, and which datasets it takes.

A run is compared with a reference run of the same model on exactly the
batches that should train (the same optimizer steps on one device, in
float64), so that a batch left out, or one trained twice, shows in the weights.
"""

from __future__ import annotations

import contextlib
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.models.accumulation import group_micro_batches
from tensorflow_similarity.models.view_pairs import pack_view_pairs
from tensorflow_similarity.testing import mirrored_strategy
from tests.models.contrastive_fixtures import tiny_model, views

BATCH = 4
POOL = views(3, 6 * BATCH)


@contextlib.contextmanager
def float64():
    """float64, so that runs whose batches have a static or a dynamic size agree to ~1e-12."""
    previous = keras.config.floatx()
    keras.config.set_floatx("float64")
    keras.config.set_dtype_policy("float64")
    try:
        yield
    finally:
        keras.config.set_floatx(previous)
        keras.config.set_dtype_policy(previous)


@pytest.fixture(autouse=True)
def _float64():
    with float64():
        yield


def samples(n):
    """The first `n` samples of one pool of view pairs, as an unbatched dataset."""
    return tf.data.Dataset.from_tensor_slices((POOL[0][:n], POOL[1][:n]))


def train(data, accumulation_steps=2, strategy=None, **fit_kwargs):
    """SimCLR with `accumulation_steps`, fitted on `data`; returns the model."""
    with (strategy or tf.distribute.get_strategy()).scope():
        model = tiny_model("simclr", accumulation_steps=accumulation_steps)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.3))
    model.fit(data, verbose=0, **fit_kwargs)
    return model


@pytest.fixture(scope="module")
def four_batches_twice():
    """The weights after 2 epochs on 4 batches of one static size: 4 steps of 2 batches."""
    with float64():
        model = train(samples(4 * BATCH).batch(BATCH, drop_remainder=True), epochs=2)
        return [w.numpy() for w in model.weights]


def assert_same_weights(model, reference):
    assert len(model.weights) == len(reference)
    for got, expected in zip(model.weights, reference, strict=True):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def accumulation_warnings(record):
    return [str(w.message) for w in record if "accumulation_steps" in str(w.message)]


@pytest.fixture
def no_accumulation_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*accumulation_steps")
        yield


def test_an_epochs_incomplete_step_is_named_once_and_never_trains(four_batches_twice):
    five = samples(5 * BATCH).batch(BATCH, drop_remainder=True)
    with pytest.warns(UserWarning) as record:
        model = train(five, epochs=2)
    (message,) = accumulation_warnings(record)  # Once for the run, not once per epoch.
    assert "5 batches per epoch and accumulation_steps=2" in message
    assert "2 optimizer steps of 2 batches" in message
    assert "the last 1 batch (batch 5) never trains, in every epoch" in message
    assert int(model.optimizer.iterations) == 4
    assert_same_weights(model, four_batches_twice)


def test_the_warning_counts_the_batches_left_out_of_each_epoch():
    ten = samples(10 * 2).batch(2, drop_remainder=True)
    with pytest.warns(UserWarning) as record:
        group_micro_batches(ten, 3)
    (message,) = accumulation_warnings(record)
    assert "10 batches per epoch and accumulation_steps=3" in message
    assert "3 optimizer steps of 3 batches" in message
    assert "the last 1 batch (batch 10) never trains, in every epoch" in message
    with pytest.warns(UserWarning) as record:
        group_micro_batches(ten, 4, steps_per_epoch=1)
    (message,) = accumulation_warnings(record)
    assert "10 batches and accumulation_steps=4" in message
    assert "fit takes 2 optimizer steps of 4 batches" in message
    assert "the last 2 batches (batches 9 to 10) never train." in message


def test_a_dataset_of_unknown_length_is_warned_about():
    unknown = samples(4 * BATCH).filter(lambda a, b: True).batch(BATCH, drop_remainder=True)
    with pytest.warns(UserWarning) as record:
        group_micro_batches(unknown, 2)
    (message,) = accumulation_warnings(record)
    assert "number of batches is unknown" in message
    assert "assert_cardinality" in message


def test_fewer_batches_than_one_step_are_refused_before_any_work():
    model = tiny_model("simclr", sync_bn=False, accumulation_steps=16)
    model.compile(optimizer="sgd")
    ten = samples(10 * 2).batch(2, drop_remainder=True)
    with pytest.raises(ValueError, match="10 batches, fewer than accumulation_steps=16"):
        model.fit(ten, epochs=2, verbose=0)
    assert model.train_function is None
    assert int(model.optimizer.iterations) == 0
    with pytest.raises(ValueError, match="fewer than accumulation_steps=16"):
        model.fit(ten, epochs=2, steps_per_epoch=1, verbose=0)


def test_a_repeated_dataset_runs_its_steps_across_the_datasets_end(no_accumulation_warning):
    indices = tf.data.Dataset.range(5 * 2).batch(2, drop_remainder=True)  # Batches 0 to 4.
    grouped = group_micro_batches(indices.repeat(), 2)
    steps = [step.numpy()[0].tolist() for step in grouped.take(3)]
    # [batch, steps] per element: the first sample of each of a step's batches.
    assert steps == [[0, 2], [4, 6], [8, 0]]


def test_batches_without_drop_remainder_train_when_they_have_one_size(
    four_batches_twice, no_accumulation_warning
):
    dynamic = samples(4 * BATCH).batch(BATCH)
    assert dynamic.element_spec[0].shape[0] is None
    model = train(dynamic, epochs=2)
    assert int(model.optimizer.iterations) == 4
    assert_same_weights(model, four_batches_twice)


def test_batches_without_drop_remainder_reach_two_replicas_as_fixed_ones_do():
    strategy = mirrored_strategy(2)
    per_replica = []
    for drop_remainder in (False, True):
        pairs = pack_view_pairs(samples(4 * BATCH).batch(BATCH, drop_remainder))  # As fit does.
        grouped = group_micro_batches(pairs, 2)
        per_replica.append(
            [
                [t.numpy() for t in strategy.experimental_local_results(step)]
                for step in strategy.experimental_distribute_dataset(grouped)
            ]
        )
    dynamic, fixed = per_replica
    assert len(fixed) == 2 and all(len(step) == 2 for step in fixed)
    for got, expected in zip(dynamic, fixed, strict=True):
        for replica, reference in zip(got, expected, strict=True):
            np.testing.assert_array_equal(replica, reference)


def test_a_step_of_batches_of_different_sizes_says_why_and_names_the_fix():
    # 12 samples in batches of 5: 5, 5 and 2, one step of three.
    grouped = group_micro_batches(samples(12).batch(5), 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one tensor") as error:
        next(iter(grouped))
    assert "drop_remainder=True" in str(error.value)
    assert "[5 5 2]" in str(error.value)
