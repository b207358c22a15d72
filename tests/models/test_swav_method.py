"""SwAV as a method: its queue, frozen prototypes and multi-crop views, across replicas.

Exactness is shown in float64: one device holding the global batch against 2
replicas holding different rows, over three optimizer steps in which the
prototypes are frozen, then the queue fills, then takes part in the codes;
every variable (the queue's contents and order included) agrees to ~1e-12.
The loss itself is `tests/losses/test_swav.py`'s.
"""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.models import create_contrastive_model
from tensorflow_similarity.testing import mirrored_strategy
from tests.models.contrastive_fixtures import IMAGE_SHAPE

# Step 0: prototypes frozen; the queue (two steps of 8 rows) is full after step 1, used in step 2.
OPTIONS = {"queue_size": 16, "freeze_prototypes_steps": 1}


pytestmark = pytest.mark.usefixtures("float64")


def swav(options=None, **kwargs):
    keras.utils.set_random_seed(1)
    inputs = keras.Input((None, None, IMAGE_SHAPE[-1]))
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(x))
    return create_contrastive_model(
        keras.Model(inputs, x),
        "swav",
        projector_hidden_dim=16,
        projector_output_dim=8,
        sync_bn=True,
        algorithm_options=OPTIONS if options is None else options,
        **kwargs,
    )


def data(batches, local_crops=0, seed=5, drop_remainder=False):
    rng = np.random.default_rng(seed)
    views = rng.normal(size=(8 * batches, 2, *IMAGE_SHAPE))
    if not local_crops:
        return tf.data.Dataset.from_tensor_slices((views,)).batch(8, drop_remainder)
    crops = rng.normal(size=(8 * batches, local_crops, 4, 4, IMAGE_SHAPE[-1]))
    return tf.data.Dataset.from_tensor_slices((views, crops)).batch(8, drop_remainder)


def train(model, dataset, epochs=1, **fit_kwargs):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.3, momentum=0.9))
    history = model.fit(dataset, epochs=epochs, verbose=0, **fit_kwargs)
    return history.history, [(w.path, w.numpy()) for w in model.weights]


def assert_same_variables(got, expected, tol=1e-12):
    assert len(got) == len(expected)
    for (_, value), (path, reference) in zip(got, expected, strict=True):
        scale = max(1.0, float(np.max(np.abs(reference)))) if reference.size else 1.0
        np.testing.assert_allclose(value, reference, rtol=0, atol=tol * scale, err_msg=path)


@functools.cache
def one_device(local_crops, accumulation_steps):
    dataset = data(3 * accumulation_steps, local_crops)
    return train(swav(accumulation_steps=accumulation_steps), dataset)


@pytest.mark.parametrize(
    "local_crops, accumulation_steps", [(0, 2), (3, 1)], ids=["two-views-accumulated", "multi-crop"]
)
def test_three_steps_on_two_replicas_match_one_device(local_crops, accumulation_steps):
    ref_history, expected = one_device(local_crops, accumulation_steps)
    with mirrored_strategy(2).scope():
        model = swav(accumulation_steps=accumulation_steps)
        history, got = train(model, data(3 * accumulation_steps, local_crops))
    np.testing.assert_allclose(history["loss"], ref_history["loss"], rtol=1e-12)
    # The monitor is computed in float32, whatever the policy.
    np.testing.assert_allclose(history["code_entropy"], ref_history["code_entropy"], rtol=1e-6)
    assert_same_variables(got, expected)
    reference = dict(expected)
    assert reference["contrastive_model/queue_rows"] == 16
    np.testing.assert_allclose(np.linalg.norm(reference["contrastive_model/queue"], axis=-1), 1.0)


def step_losses(model, dataset):
    """Each optimizer step's loss, from the running means `fit` logs after each batch."""
    means = []
    log = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: means.append(logs["loss"])
    )
    train(model, dataset, callbacks=[log])
    previous = [0.0, *means[:-1]]
    return [(k + 1) * m - k * p for k, (m, p) in enumerate(zip(means, previous, strict=True))]


def test_the_queue_changes_the_codes_once_full():
    """Step 2 of 3 is the first with a full queue: the runs with and without agree until then."""
    with_queue = step_losses(swav(), data(3))
    without = step_losses(swav({"freeze_prototypes_steps": 1}), data(3))
    np.testing.assert_allclose(with_queue[:2], without[:2], rtol=1e-10)
    assert abs(with_queue[2] - without[2]) > 1e-6


def test_the_prototypes_are_frozen_for_their_steps_only():
    model = swav({"freeze_prototypes_steps": 1})
    prototypes = model.projector.layers[-1].kernel
    mlp = model.projector.layers[1].trainable_weights[0]
    start = prototypes.numpy(), mlp.numpy()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.3))
    batches = [batch for (batch,) in data(2)]
    model.fit(tf.data.Dataset.from_tensors((batches[0],)), verbose=0)
    np.testing.assert_array_equal(prototypes.numpy(), start[0])
    assert not np.allclose(mlp.numpy(), start[1])
    model.fit(tf.data.Dataset.from_tensors((batches[1],)), verbose=0)
    assert not np.allclose(prototypes.numpy(), start[0])


def test_save_load_and_keep_training_is_the_uninterrupted_run(tmp_path):
    dataset = data(2)
    _, expected = train(swav(), dataset, epochs=3)

    first = swav()
    stop = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: setattr(first, "stop_training", True)
    )
    train(first, dataset, epochs=3, callbacks=[stop])
    path = tmp_path / "swav.keras"
    first.save(path)
    resumed = keras.saving.load_model(path)
    assert int(resumed.queue_rows.numpy()) == 16
    resumed.fit(dataset, epochs=3, initial_epoch=1, verbose=0)
    got = [w.numpy() for w in resumed.weights]
    assert len(got) == len(expected)
    for value, (name, reference) in zip(got, expected, strict=True):
        np.testing.assert_array_equal(value, reference, err_msg=name)


def test_bad_options_and_heads_are_refused_before_any_work():
    model = swav({"queue_size": 12})
    with pytest.raises(ValueError, match="queue_size=12 must be a multiple.*enqueues 8"):
        train(model, data(1, drop_remainder=True))
    assert int(model.optimizer.iterations) == 0
    # A batch of unknown static size is checked when the step runs, before its forward pass:
    # no weight moves (the optimizer may count the step).
    before = [w.numpy() for w in model.weights]
    with pytest.raises(tf.errors.InvalidArgumentError, match="queue_size=12 must be a multiple"):
        train(model, data(1))
    for weight, value in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(weight.numpy(), value, err_msg=weight.path)
    with pytest.raises(ValueError, match="freeze_prototypes_steps must be an int >= 0"):
        swav({"freeze_prototypes_steps": -1})
    inputs = keras.Input((4,))
    backbone = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    features = keras.Input((3,))
    plain = keras.Model(features, keras.layers.Dense(2)(features))
    with pytest.raises(ValueError, match="must end in its prototypes"):
        create_contrastive_model(backbone, "swav", projector=plain)
