"""DINOLoss and DINO's teacher functions against their NumPy formulas."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import (
    DINOLoss,
    dino_center_update,
    dino_teacher_probabilities,
)
from tests.losses import numpy_reference

K = 16


def _crops(batch, teacher_views, student_views, seed=0):
    """Teacher probabilities `[batch, V_t, K]` and student logits `[batch, V_s, K]`."""
    rng = np.random.default_rng(seed)
    teacher = numpy_reference.dino_teacher_probabilities(
        rng.normal(size=(batch, teacher_views, K)), np.zeros(K), 0.5
    )
    return teacher, 0.3 * rng.normal(size=(batch, student_views, K))


@pytest.mark.parametrize(
    ("batch", "teacher_views", "student_views", "temperature"),
    [(1, 1, 2, 0.1), (4, 2, 2, 0.1), (5, 2, 6, 0.2), (3, 1, 4, 1.0), (6, 3, 3, 0.05)],
)
def test_matches_numpy_formula(batch, teacher_views, student_views, temperature):
    teacher, student = _crops(batch, teacher_views, student_views, seed=batch)
    expected = numpy_reference.dino_terms(teacher, student, temperature)

    def loss(**kwargs):
        kwargs.update(student_temperature=temperature, dtype="float64")
        return DINOLoss(**kwargs)(teacher, student)

    np.testing.assert_allclose(loss().numpy(), expected.mean(), rtol=1e-12)
    np.testing.assert_allclose(loss(reduction="sum").numpy(), expected.sum(), rtol=1e-12)
    np.testing.assert_allclose(loss(reduction="none").numpy(), expected, rtol=1e-12)


def test_a_crop_is_never_compared_with_itself():
    teacher, student = _crops(3, 1, 3, seed=7)
    loss = DINOLoss(reduction="none", dtype="float64")
    noise = np.random.default_rng(8).normal(size=(3, K))
    same_crop, local_crop = student.copy(), student.copy()
    same_crop[:, 0] += noise
    local_crop[:, 2] += noise

    # The student's view of the teacher's own crop takes no part in the loss; a local crop does.
    np.testing.assert_allclose(loss(teacher, same_crop), loss(teacher, student), rtol=1e-12)
    assert np.abs(loss(teacher, local_crop) - loss(teacher, student)).min() > 1e-3


def test_gradient_reaches_the_student_and_not_the_teacher():
    teacher, student = (tf.constant(v) for v in _crops(4, 2, 5, seed=1))

    with tf.GradientTape(persistent=True) as tape:
        tape.watch([teacher, student])
        value = DINOLoss(dtype="float64")(teacher, student)
    gradient = tape.gradient(value, student).numpy()

    assert tape.gradient(value, teacher) is None
    # Each crop's gradient is that of a softmax cross entropy: its entries sum to 0.
    np.testing.assert_allclose(gradient.sum(axis=-1), 0.0, atol=1e-12)
    step = 1e-6
    bumped = [student.numpy().copy() for _ in range(2)]
    bumped[0][1, 3, 2] += step
    bumped[1][1, 3, 2] -= step
    up, down = (numpy_reference.dino_terms(teacher.numpy(), s, 0.1).mean() for s in bumped)
    np.testing.assert_allclose(gradient[1, 3, 2], (up - down) / (2 * step), rtol=1e-6)


def test_config_round_trip():
    loss = DINOLoss(student_temperature=0.2, reduction="sum", name="dino", dtype="float64")
    teacher, student = _crops(3, 2, 4, seed=2)

    serialized = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(serialized)

    assert serialized["registered_name"] == "Similarity>DINOLoss"
    assert type(restored) is DINOLoss
    assert restored.get_config() == loss.get_config()
    assert loss.get_config()["student_temperature"] == 0.2
    np.testing.assert_allclose(
        restored(teacher, student).numpy(), loss(teacher, student).numpy(), rtol=1e-12
    )


def test_rejects_invalid_student_temperature():
    for temperature in (0.0, -0.1, float("nan"), float("inf"), "0.1", None, True):
        with pytest.raises(ValueError, match="DINOLoss: student_temperature must be a finite"):
            DINOLoss(student_temperature=temperature)
    with pytest.raises(ValueError, match="DINOLoss: unknown reduction='max'"):
        DINOLoss(reduction="max")


@pytest.mark.parametrize(
    ("teacher_shape", "student_shape", "message"),
    [
        ((4, K), (4, 2, K), "expects rank-3 inputs"),
        ((4, 2, K), (4, 2 * K), "expects rank-3 inputs"),
        ((4, 2, K), (5, 4, K), "same batch size"),
        ((4, 2, K), (4, 4, K + 1), "same number K of prototypes"),
        ((4, 3, K), (4, 2, K), "at least as many student crops as teacher crops"),
        ((4, 1, K), (4, 1, K), "and at least 2"),
        ((4, 0, K), (4, 2, K), "at least one teacher crop"),
    ],
)
def test_rejects_inputs_of_the_wrong_shape(teacher_shape, student_shape, message):
    with pytest.raises(ValueError, match=message):
        DINOLoss()(np.ones(teacher_shape), np.ones(student_shape))


def test_checks_shapes_a_trace_leaves_unknown_at_run_time():
    loss = DINOLoss(dtype="float64")
    spec = tf.TensorSpec([None, None, None], tf.float64)
    traced = tf.function(lambda t, s: loss(t, s), input_signature=[spec, spec])
    teacher, student = _crops(3, 2, 4, seed=3)

    np.testing.assert_allclose(traced(teacher, student).numpy(), loss(teacher, student).numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="V_s >= max"):
        traced(teacher, student[:, :1])
    with pytest.raises(tf.errors.InvalidArgumentError, match="same batch size and K"):
        traced(teacher, student[:, :, :4])


def test_teacher_probabilities_match_numpy_and_have_no_gradient():
    rng = np.random.default_rng(4)
    logits, center = tf.constant(rng.normal(size=(3, 2, K))), rng.normal(size=K)

    with tf.GradientTape() as tape:
        tape.watch(logits)
        probabilities = dino_teacher_probabilities(logits, center, temperature=0.04)

    expected = numpy_reference.dino_teacher_probabilities(logits.numpy(), center, 0.04)
    np.testing.assert_allclose(probabilities.numpy(), expected, rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(probabilities.numpy().sum(axis=-1), 1.0, rtol=1e-12)
    assert tape.gradient(probabilities, logits) is None
    scheduled = dino_teacher_probabilities(logits, center, tf.Variable(0.04, dtype=tf.float64))
    np.testing.assert_allclose(scheduled.numpy(), probabilities.numpy(), rtol=1e-12)


def test_center_update_is_an_exponential_average():
    rng = np.random.default_rng(5)
    center, mean = rng.normal(size=K), rng.normal(size=K)

    updated = dino_center_update(center, mean, momentum=0.9).numpy()

    expected = [0.9 * c + (1 - 0.9) * m for c, m in zip(center, mean, strict=True)]
    np.testing.assert_allclose(updated, expected, rtol=1e-12)
    np.testing.assert_allclose(dino_center_update(center, mean, 1.0).numpy(), center)
    np.testing.assert_allclose(dino_center_update(center, mean, tf.constant(0.0)), mean)


def test_teacher_functions_reject_bad_hyperparameters():
    for temperature in (0.0, -1.0, float("nan"), None, "0.04", True):
        with pytest.raises(ValueError, match="dino_teacher_probabilities: temperature must be"):
            dino_teacher_probabilities(np.zeros((2, K)), np.zeros(K), temperature)
    for momentum in (-0.1, 1.5, float("nan"), None, "0.9"):
        with pytest.raises(
            ValueError, match=r"dino_center_update: momentum must be .* \[0.0, 1.0\]"
        ):
            dino_center_update(np.zeros(K), np.zeros(K), momentum)
