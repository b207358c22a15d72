"""WarmupCosineDecay: 0.17's values, a float64 loop formula, serialisation, argument checks."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.schedules import WarmupCosineDecay

# Computed with tensorflow-similarity 0.17.1 in its virtualenv:
#   source /tmp/tfsim017/bin/activate && TF_USE_LEGACY_KERAS=1 python -c "
#   from tensorflow_similarity.schedules import WarmupCosineDecay as W
#   s = W(*args); print([(t, float(s(t))) for t in steps])"
VALUES_017 = {
    (0.1, 100, 10, 0.0): [
        (0, 0.0),
        (1, 0.010000000707805157),
        (5, 0.05000000074505806),
        (10, 0.10000000149011612),
        (11, 0.0999695435166359),
        (55, 0.04999999701976776),
        (99, 3.045797348022461e-05),
        (100, 0.0),
        (150, 0.0),
    ],
    (0.5, 1000, 100, 0.2): [
        (0, 0.0),
        (1, 0.004999999888241291),
        (5, 0.02500000037252903),
        (100, 0.5),
        (101, 0.4999987781047821),
        (550, 0.29999998211860657),
        (999, 0.10000121593475342),
        (1000, 0.10000000149011612),
        (1050, 0.10000000149011612),
    ],
    (1.0, 10, 0, 0.0): [
        (0, 1.0),
        (1, 0.9755282402038574),
        (5, 0.4999999701976776),
        (9, 0.024471759796142578),
        (10, 0.0),
        (60, 0.0),
    ],
}


def warmup_cosine_reference(max_lr, total_steps, warmup_steps, alpha, steps):
    """The schedule's formula in float64, one step at a time."""
    values = []
    for step in steps:
        t = min(step, total_steps)
        if t < warmup_steps:
            values.append(max_lr * t / warmup_steps)
        else:
            progress = (t - warmup_steps) / (total_steps - warmup_steps)
            cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
            values.append(max_lr * ((1.0 - alpha) * cosine + alpha))
    return values


@pytest.mark.parametrize("args", list(VALUES_017), ids=str)
def test_values_are_017s(args):
    schedule = WarmupCosineDecay(*args)
    steps, expected = zip(*VALUES_017[args], strict=True)

    values = [float(schedule(step)) for step in steps]

    np.testing.assert_allclose(values, expected, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "args", [(0.1, 100, 10, 0.0), (0.5, 1000, 100, 0.2), (1.0, 10, 0, 0.0), (3e-4, 57, 56, 0.5)]
)
def test_values_follow_the_float64_formula_at_every_step(args):
    schedule = WarmupCosineDecay(*args)
    steps = list(range(0, args[1] + 20))

    values = [float(schedule(tf.constant(step, tf.int64))) for step in steps]

    np.testing.assert_allclose(
        values, warmup_cosine_reference(*args, steps), rtol=1e-6, atol=2e-7 * args[0]
    )
    assert schedule(3).dtype == tf.float32


def test_is_keras_cosine_decay_and_drives_an_optimizer():
    schedule = WarmupCosineDecay(0.1, 100, 10)
    optimizer = keras.optimizers.SGD(learning_rate=schedule)
    variable = keras.Variable([1.0])

    for _ in range(5):
        optimizer.apply_gradients([(tf.constant([1.0]), variable)])

    assert isinstance(schedule, keras.optimizers.schedules.CosineDecay)
    # SGD updates with the rate of steps 0..4: 0.1 * (0 + 1 + 2 + 3 + 4) / 10.
    np.testing.assert_allclose(variable.numpy(), [1.0 - 0.1], rtol=1e-6)
    np.testing.assert_allclose(float(optimizer.learning_rate), 0.05, rtol=1e-6)


def test_config_round_trips_and_is_017s():
    schedule = WarmupCosineDecay(0.5, 1000, 100, alpha=0.2)
    config = schedule.get_config()

    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    serialised_sgd = keras.optimizers.serialize(keras.optimizers.SGD(learning_rate=schedule))
    registered_name = serialised_sgd["config"]["learning_rate"]["registered_name"]
    restored_sgd = keras.optimizers.deserialize(serialised_sgd)

    assert config == {
        "max_learning_rate": 0.5,
        "total_steps": 1000,
        "warmup_steps": 100,
        "alpha": 0.2,
        "name": None,
    }
    assert type(restored) is WarmupCosineDecay and restored.get_config() == config
    assert registered_name == "Similarity>WarmupCosineDecay"
    variable = keras.Variable([0.0])
    for _ in range(150):
        restored_sgd.apply_gradients([(tf.constant([1.0]), variable)])
    # SGD's 150 updates: the schedule's rates at steps 0..149, summed.
    expected = sum(float(schedule(step)) for step in range(150))
    np.testing.assert_allclose(-variable.numpy(), [expected], rtol=1e-5)
    for step in (0, 50, 100, 550, 1000):
        assert float(restored(step)) == float(schedule(step))
    assert WarmupCosineDecay(0.1, 10, 2, name="lr").get_config()["name"] == "lr"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"warmup_steps": 10}, r"less than the total steps \(warmup_steps=10, total_steps=10,"),
        ({"warmup_steps": 11}, "must be less than"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"total_steps": 0}, "total_steps"),
        ({"alpha": 1.5}, "alpha"),
        ({"max_learning_rate": float("nan")}, "max_learning_rate"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    arguments = {"max_learning_rate": 0.1, "total_steps": 10, "warmup_steps": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        WarmupCosineDecay(**arguments)
