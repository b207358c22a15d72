"""MoCo v2: its loss against NumPy loops, its queue across replicas, accumulation and resume.

Exactness is shown in float64: one device holding the global batch against
2 and 4 replicas, each holding different rows, over three optimizer steps;
every variable of the model (student, key encoder, batch norm statistics,
the queue's contents and order) must agree to ~1e-12.
"""

from __future__ import annotations

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import MoCoV2Loss
from tensorflow_similarity.models import ContrastiveModel
from tensorflow_similarity.testing import mirrored_strategy
from tests.models.contrastive_fixtures import tiny_model, views

QUEUE = 32  # A multiple of the 8 keys a step enqueues, and of the 16 of two micro-batches.


pytestmark = pytest.mark.usefixtures("float64")


def mocov2(queue_size=QUEUE, **kwargs):
    kwargs.setdefault("momentum", 0.5)  # A key encoder that moves far shows any error.
    return tiny_model("mocov2", algorithm_options={"queue_size": queue_size}, **kwargs)


def view_batches(batches, batch=8, seed=0):
    view1, view2 = views(seed, batches * batch)
    return tf.data.Dataset.from_tensor_slices((view1, view2)).batch(batch, drop_remainder=True)


def train(model, data, epochs=1, **fit_kwargs):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.3, momentum=0.9))
    history = model.fit(data, epochs=epochs, verbose=0, **fit_kwargs)
    return history.history, [(w.path, w.numpy()) for w in model.weights]


def run_on(num_replicas, data, **kwargs):
    if num_replicas == 1:
        return train(mocov2(**kwargs), data)
    with mirrored_strategy(num_replicas).scope():
        return train(mocov2(**kwargs), data)


@functools.cache
def one_device(accumulation_steps):
    return run_on(1, view_batches(3 * accumulation_steps), accumulation_steps=accumulation_steps)


def unit_rows(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.sum(x * x, axis=1, keepdims=True))


def reference_loss(keys, queue, queries, temperature):
    """MoCo's InfoNCE with plain loops over queries and negatives, in float64."""
    q, k, u = unit_rows(queries), unit_rows(keys), unit_rows(queue)
    terms = []
    for i in range(len(q)):
        positive = np.exp(float(q[i] @ k[i]) / temperature)
        negatives = sum(np.exp(float(q[i] @ u[j]) / temperature) for j in range(len(u)))
        terms.append(-np.log(positive / (positive + negatives)))
    return float(np.mean(terms))


def test_loss_against_numpy_loops():
    rng = np.random.default_rng(0)
    keys, queries = rng.normal(size=(2, 5, 4))
    queue = rng.normal(size=(7, 4))
    value = MoCoV2Loss(temperature=0.2, dtype="float64")(np.concatenate([keys, queue]), queries)
    assert float(value) == pytest.approx(reference_loss(keys, queue, queries, 0.2), rel=1e-12)


def test_loss_refuses_inputs_without_a_queue():
    z = np.ones((4, 3))
    with pytest.raises(ValueError, match=r"loss\(tf.concat\(\[keys, queue\], 0\), queries\)"):
        MoCoV2Loss()(z, z)


@pytest.mark.parametrize("accumulation_steps", [1, 2])
@pytest.mark.parametrize("num_replicas", [2, 4])
def test_three_steps_on_replicas_match_one_device(num_replicas, accumulation_steps):
    ref_history, expected = one_device(accumulation_steps)
    data = view_batches(3 * accumulation_steps)
    history, got = run_on(num_replicas, data, accumulation_steps=accumulation_steps)
    np.testing.assert_allclose(history["loss"], ref_history["loss"], rtol=1e-12)
    assert len(got) == len(expected)
    for (_, value), (path, reference) in zip(got, expected, strict=True):
        scale = max(1.0, float(np.max(np.abs(reference))))
        np.testing.assert_allclose(value, reference, rtol=0, atol=1e-12 * scale, err_msg=path)
    queue = dict(expected)["contrastive_model/queue"]
    # Three steps enqueued 24 (or 48) unit keys after the initial Gaussian rows.
    norms = np.linalg.norm(queue, axis=1)
    keys = min(QUEUE, 3 * 8 * accumulation_steps)
    np.testing.assert_allclose(norms[QUEUE - keys :], 1.0, rtol=1e-12)
    assert np.all(np.abs(norms[: QUEUE - keys] - 1.0) > 1e-6)


def test_a_step_enqueues_the_key_encoders_keys_in_global_batch_order():
    """One step of two micro-batches: the queue's newest rows are their keys, batch by batch."""
    accumulation_steps = 2
    model = mocov2(accumulation_steps=accumulation_steps)
    copy = ContrastiveModel.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    initial = model.queue.numpy()
    view1, view2 = views(3, 8 * accumulation_steps)
    # The keys as the step computes them: before the update, in training mode, batch by batch.
    keys = [
        copy.teacher_projector(copy.teacher_backbone(view2[i : i + 8], training=True))
        for i in range(0, len(view2), 8)
    ]
    train(model, tf.data.Dataset.from_tensor_slices((view1, view2)).batch(8))
    assert int(model.optimizer.iterations) == 1
    keys = unit_rows(np.concatenate(keys))
    expected = np.concatenate([initial[len(keys) :], keys])
    np.testing.assert_allclose(model.queue.numpy(), expected, rtol=1e-12, atol=1e-14)


def test_save_load_and_keep_training_is_the_uninterrupted_run(tmp_path):
    data = view_batches(2)
    whole = mocov2(queue_size=16)
    _, expected = train(whole, data, epochs=3)

    first = mocov2(queue_size=16)
    stop = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: setattr(first, "stop_training", True)
    )
    train(first, data, epochs=3, callbacks=[stop])
    assert int(first.optimizer.iterations) == 2
    path = tmp_path / "mocov2.keras"
    first.save(path)
    resumed = keras.saving.load_model(path)
    np.testing.assert_array_equal(resumed.queue.numpy(), first.queue.numpy())
    resumed.fit(data, epochs=3, initial_epoch=1, verbose=0)
    got = [w.numpy() for w in resumed.weights]
    assert len(got) == len(expected)
    for value, (path, reference) in zip(got, expected, strict=True):
        np.testing.assert_array_equal(value, reference, err_msg=path)


@pytest.mark.parametrize(
    "queue_size, accumulation_steps, enqueued",
    [(4, 1, 8), (12, 1, 8), (24, 2, 16)],
    ids=["smaller", "not-a-multiple", "not-a-multiple-of-two-micro-batches"],
)
def test_a_queue_that_holds_no_whole_steps_is_refused_before_training(
    queue_size, accumulation_steps, enqueued
):
    model = mocov2(queue_size=queue_size, accumulation_steps=accumulation_steps)
    before = [w.numpy() for w in model.weights]
    with pytest.raises(
        ValueError, match=f"queue_size={queue_size} must be a multiple.*enqueues {enqueued}"
    ):
        train(model, view_batches(2 * accumulation_steps))
    assert int(model.optimizer.iterations) == 0
    for value, reference in zip(model.weights, before, strict=True):
        if "schedule_steps" not in value.path:  # fit's run length, set before the first step.
            np.testing.assert_array_equal(value.numpy(), reference, err_msg=value.path)


@pytest.mark.parametrize("queue_size", [0, 2.5, "big"])
def test_a_bad_queue_size_is_refused_when_the_model_is_made(queue_size):
    with pytest.raises(ValueError, match="queue_size must be an int >= 1"):
        mocov2(queue_size=queue_size)
