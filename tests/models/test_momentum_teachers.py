"""BYOL, MoCo v3 and DINO: the momentum teacher, its schedule and gradient accumulation.

Exactness is shown in float64: one device holding the global batch against
2 and 4 replicas, each holding different rows, over three optimizer steps;
every variable of the model (student, teacher, batch norm moving statistics,
DINO's centre) must agree to ~1e-12.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model
from tensorflow_similarity.models.momentum import cosine_momentum
from tensorflow_similarity.testing import mirrored_strategy
from tests.models.contrastive_fixtures import IMAGE_SHAPE, tiny_model, views

TEACHERS = ["byol", "mocov3", "dino"]
# DINO's schedules on a 3-step run: the teacher temperature warms up over its one epoch, and
# the prototypes' layer is not frozen, so that every part of the step is compared.
DINO_OPTIONS = {"warmup_teacher_temperature_epochs": 1, "freeze_last_layer_epochs": 0}


pytestmark = pytest.mark.usefixtures("float64")


def teacher_model(algorithm, **kwargs):
    if algorithm == "dino":
        kwargs.setdefault("algorithm_options", DINO_OPTIONS)
    if algorithm in TEACHERS:
        kwargs.setdefault("momentum", 0.5)  # A teacher that moves far shows any error.
    return tiny_model(algorithm, **kwargs)


def view_batches(batches, batch=8, seed=0):
    view1, view2 = views(seed, batches * batch)
    return tf.data.Dataset.from_tensor_slices((view1, view2)).batch(batch, drop_remainder=True)


def train(model, data, epochs=1, **fit_kwargs):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.3, momentum=0.9))
    history = model.fit(data, epochs=epochs, verbose=0, **fit_kwargs)
    teacher = {
        id(w)
        for net in (model.teacher_backbone, model.teacher_projector)
        if net
        for w in net.weights
    }
    named = [("teacher:" if id(w) in teacher else "") + w.path for w in model.weights]
    return history.history, [
        (name, w.numpy()) for name, w in zip(named, model.weights, strict=True)
    ]


def assert_same_variables(got, expected, tol=1e-12):
    """Variable by variable, in `model.weights` order (layer names differ between models)."""
    assert len(got) == len(expected)
    for (_, value), (path, reference) in zip(got, expected, strict=True):
        scale = max(1.0, float(np.max(np.abs(reference)))) if reference.size else 1.0
        np.testing.assert_allclose(value, reference, rtol=0, atol=tol * scale, err_msg=path)


def run_on(num_replicas, algorithm, data, **kwargs):
    if num_replicas == 1:
        model = teacher_model(algorithm, **kwargs)
        return train(model, data)
    with mirrored_strategy(num_replicas).scope():
        model = teacher_model(algorithm, **kwargs)
        return train(model, data)


@pytest.mark.parametrize("algorithm", TEACHERS)
@pytest.mark.parametrize("num_replicas", [2, 4])
def test_three_steps_on_replicas_match_one_device(algorithm, num_replicas):
    data = view_batches(3)
    ref_history, ref_variables = run_on(1, algorithm, data)
    history, variables = run_on(num_replicas, algorithm, data)
    np.testing.assert_allclose(history["loss"], ref_history["loss"], rtol=1e-12)
    assert_same_variables(variables, ref_variables)
    paths = dict(ref_variables)
    teacher = [p for p in paths if p.startswith("teacher:")]
    assert any("moving_mean" in p for p in teacher)  # The teacher's statistics are compared.
    if algorithm == "dino":
        assert np.any(paths["contrastive_model/dino_center"] != 0)


# The methods without a teacher share one accumulation path, whatever their loss (each loss's
# replica parity is `tests/losses/test_replica_parity.py`'s): SimCLR stands for them.
@pytest.mark.parametrize("algorithm", [*TEACHERS, "simclr"])
def test_accumulated_steps_on_two_replicas_match_one_device(algorithm):
    data = view_batches(6)
    ref_history, ref_variables = run_on(1, algorithm, data, accumulation_steps=2)
    history, variables = run_on(2, algorithm, data, accumulation_steps=2)
    np.testing.assert_allclose(history["loss"], ref_history["loss"], rtol=1e-12)
    assert_same_variables(variables, ref_variables)


def test_a_single_batch_moves_only_batch_norm_statistics():
    """Within an accumulated step, a batch changes nothing the optimizer or the teacher owns."""
    model = teacher_model("dino", accumulation_steps=2)
    model.compile(optimizer=keras.optimizers.SGD(0.3))
    model.optimizer.build(model.trainable_variables)
    before = {w.path: w.numpy() for w in model.weights}
    view1, view2 = views(0)
    gradients, _, _ = model.micro_batch_gradients(np.stack([view1, view2], axis=1))
    assert any(float(tf.reduce_max(tf.abs(g))) > 0 for g in gradients)
    moved = [w.path for w in model.weights if not np.array_equal(w.numpy(), before[w.path])]
    assert moved, "the student's and the teacher's batch norms ran in training mode"
    assert all("moving_mean" in p or "moving_variance" in p for p in moved), moved
    assert int(model.optimizer.iterations) == 0


@pytest.mark.parametrize("algorithm", TEACHERS)
def test_the_teacher_moves_once_per_applied_step(algorithm):
    """After one step of two batches: teacher = m0 * teacher0 + (1 - m0) * student1."""
    model = teacher_model(algorithm, accumulation_steps=2, momentum=0.25)
    teachers, students = model.teacher_pairs()
    # Each teacher weight follows the student's weight of the same layer and name.
    assert [t.path for t in teachers] == [s.path for s in students]
    initial = [t.numpy() for t in teachers]
    history, _ = train(model, view_batches(2))
    assert int(model.optimizer.iterations) == 1
    for teacher, student, start in zip(teachers, students, initial, strict=True):
        expected = 0.25 * start + 0.75 * student.numpy()
        np.testing.assert_allclose(teacher.numpy(), expected, rtol=1e-13, atol=1e-15)


def test_dino_centre_is_the_moving_mean_of_the_teachers_global_outputs():
    model = teacher_model("dino")
    view1, view2 = views(3)
    # The teacher's outputs as the step computes them: before the update, in training mode.
    copy = ContrastiveModel.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    outputs = [
        copy.teacher_projector(copy.teacher_backbone(v, training=True), training=True).numpy()
        for v in (view1, view2)
    ]
    train(model, tf.data.Dataset.from_tensors((view1, view2)))
    mean = np.concatenate(outputs).mean(axis=0)
    np.testing.assert_allclose(model.dino_center.numpy(), 0.1 * mean, rtol=1e-12, atol=1e-15)


def test_cosine_momentum_against_its_closed_form():
    base, total = 0.99, 40
    for step in (0, 20, 40, 55):
        expected = 1 - (1 - base) * (math.cos(math.pi * min(step, total) / total) + 1) / 2
        got = float(cosine_momentum(tf.constant(step, tf.float64), total, base))
        assert got == pytest.approx(expected, abs=1e-15)
    assert float(cosine_momentum(tf.constant(0.0, tf.float64), 40, base)) == pytest.approx(base)
    assert float(cosine_momentum(tf.constant(40.0, tf.float64), 40, base)) == 1.0


@pytest.mark.parametrize("algorithm", ["byol", "dino"])
def test_save_load_and_keep_training_is_the_uninterrupted_run(tmp_path, algorithm):
    data = view_batches(2)
    whole = teacher_model(algorithm, momentum=None)
    _, expected = train(whole, data, epochs=3)
    assert whole.schedule_steps.numpy().tolist() == [6, 2]

    # Interrupted after its first epoch, as a run that is stopped and resumed.
    first = teacher_model(algorithm, momentum=None)
    stop = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: setattr(first, "stop_training", True)
    )
    train(first, data, epochs=3, callbacks=[stop])
    assert int(first.optimizer.iterations) == 2
    path = tmp_path / f"{algorithm}.keras"
    first.save(path)
    resumed = keras.saving.load_model(path)
    resumed.fit(data, epochs=3, initial_epoch=1, verbose=0)
    got = [w.numpy() for w in resumed.weights]
    assert len(got) == len(expected)
    for value, (path, reference) in zip(got, expected, strict=True):
        np.testing.assert_array_equal(value, reference, err_msg=path)
    # The schedule ran over the whole run's 6 steps: the last step's momentum is 1.
    assert float(resumed.teacher_momentum()) == pytest.approx(
        1 - (1 - 0.996) * (math.cos(math.pi * 5 / 6) + 1) / 2, abs=1e-12
    )


def test_dino_with_local_crops_on_two_replicas_matches_one_device():
    def model():
        keras.utils.set_random_seed(1)
        inputs = keras.Input((None, None, IMAGE_SHAPE[-1]))
        x = keras.layers.Conv2D(4, 3, padding="same")(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(x))
        return create_contrastive_model(
            keras.Model(inputs, x),
            "dino",
            projector_hidden_dim=16,
            projector_output_dim=8,
            sync_bn=True,
            algorithm_options=DINO_OPTIONS,
        )

    rng = np.random.default_rng(5)
    global_views = rng.normal(size=(16, 2, *IMAGE_SHAPE))
    local_views = rng.normal(size=(16, 3, 4, 4, IMAGE_SHAPE[-1]))
    data = tf.data.Dataset.from_tensor_slices((global_views, local_views)).batch(8)
    ref_history, ref_variables = train(model(), data)
    with mirrored_strategy(2).scope():
        history, variables = train(model(), data)
    np.testing.assert_allclose(history["loss"], ref_history["loss"], rtol=1e-12)
    assert_same_variables(variables, ref_variables)
    # The local crops count: without them the loss differs.
    without = train(model(), tf.data.Dataset.from_tensor_slices((global_views,)).batch(8))
    assert not np.allclose(without[0]["loss"], ref_history["loss"])


def test_embed_returns_the_student_or_the_teacher():
    model = teacher_model("byol")
    images = views(0)[0]
    np.testing.assert_array_equal(
        model.embed(images, output="teacher"), model.teacher_backbone.predict(images, verbose=0)
    )
    np.testing.assert_array_equal(model.embed(images), model.backbone.predict(images, verbose=0))
    with pytest.raises(ValueError, match="has no momentum teacher"):
        tiny_model("simclr").embed(images, output="teacher")


def test_bad_arguments_are_refused_before_any_work():
    frozen = tiny_model("simclr").backbone
    frozen.trainable = False
    with pytest.raises(ValueError, match="no trainable weights"):
        create_contrastive_model(frozen, "byol", projector_hidden_dim=8, projector_output_dim=4)
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\]"):
        teacher_model("mocov3", momentum=1.5)
    with pytest.raises(ValueError, match="has no momentum teacher"):
        tiny_model("simclr", momentum=0.9)
    with pytest.raises(ValueError, match="accumulation_steps"):
        tiny_model("byol", accumulation_steps=0)
    with pytest.raises(ValueError, match="output_dim"):
        create_contrastive_model(frozen, "dino", projector_output_dim=0)
    with pytest.raises(ValueError, match="has no option 'temperature'"):
        tiny_model("dino", algorithm_options={"temperature": 0.1})
    with pytest.raises(ValueError, match="center_momentum"):
        tiny_model("dino", algorithm_options={"center_momentum": -0.1})
    model = teacher_model("byol", accumulation_steps=2)
    model.compile(optimizer="sgd")
    one_batch = tf.data.Dataset.from_tensor_slices(views(0, 4)).batch(4)
    with pytest.raises(ValueError, match="fewer than accumulation_steps=2"):
        model.fit(one_batch, verbose=0)
    local = tf.data.Dataset.from_tensor_slices(
        (np.zeros((8, 2, *IMAGE_SHAPE)), np.zeros((8, 2, *IMAGE_SHAPE)))
    ).batch(8)
    simclr = tiny_model("simclr")
    simclr.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="Only methods that use multi-crop"):
        simclr.fit(local, verbose=0)
    larger_local = tf.data.Dataset.from_tensor_slices(
        (np.zeros((8, 2, 6, 6, 2)), np.zeros((8, 3, 8, 8, 2)))
    ).batch(8)
    dino = teacher_model("dino")
    dino.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="local crops are smaller views"):
        dino.fit(larger_local, verbose=0)
    endless = view_batches(2).repeat()
    model = teacher_model("byol")
    model.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="steps_per_epoch"):
        model.fit(endless, epochs=1, verbose=0)


def mwms_run(strategy, views_npz, initial):
    """BYOL + LARS + accumulation for 2 optimizer steps; returns the losses and weights.

    Shared by the multi-worker test and its worker script (`mwms_teacher_worker.py`),
    which calls it under `MultiWorkerMirroredStrategy`.
    """
    from tensorflow_similarity.optimizers import LARS

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = (
        tf.data.Dataset.from_tensor_slices((views_npz["view1"], views_npz["view2"]))
        .batch(8, drop_remainder=True)
        .with_options(options)
    )
    with strategy.scope():
        model = teacher_model("byol", accumulation_steps=2)
        model.set_weights(initial)
        model.compile(optimizer=LARS(0.5, momentum=0.9, weight_decay=1e-3, eta=0.05))
    history = model.fit(data, epochs=1, verbose=0)
    return history.history["loss"], [w.numpy() for w in model.weights]


def test_lars_and_accumulation_on_two_workers_match_one_device(tmp_path):
    """BYOL's teacher, LARS and accumulation under a 2-process MultiWorkerMirroredStrategy."""
    from pathlib import Path

    from tensorflow_similarity.testing import run_local_workers

    view1, view2 = views(7, 32)
    np.savez(tmp_path / "views.npz", view1=view1, view2=view2)
    initial = teacher_model("byol").get_weights()
    np.savez(tmp_path / "initial.npz", **{f"w{i}": w for i, w in enumerate(initial)})
    loss, expected = mwms_run(
        tf.distribute.get_strategy(), np.load(tmp_path / "views.npz"), initial
    )
    run_local_workers(Path(__file__).with_name("mwms_teacher_worker.py"), 2, [str(tmp_path)], 300)
    for task in range(2):
        got = np.load(tmp_path / f"worker{task}.npz")
        np.testing.assert_allclose(got["loss"], loss, rtol=1e-12)
        for i, reference in enumerate(expected):
            scale = max(1.0, float(np.max(np.abs(reference)))) if reference.size else 1.0
            np.testing.assert_allclose(got[f"w{i}"], reference, rtol=0, atol=1e-12 * scale)
    assert not np.allclose(expected[0], initial[0])  # The steps moved the weights.


@pytest.mark.parametrize("num_replicas", [1, 2])
def test_dino_clips_each_global_gradient_and_freezes_its_prototypes(num_replicas):
    """One plain SGD step: each variable moves by lr * clip (its clipped gradient's norm)."""
    options = {"clip_grad": 1e-3, "freeze_last_layer_epochs": 1}
    scope = mirrored_strategy(num_replicas).scope() if num_replicas > 1 else _no_scope()
    with scope:
        model = teacher_model("dino", algorithm_options=options)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5))
    before = [v.numpy() for v in model.trainable_variables]
    model.fit(view_batches(1), epochs=1, verbose=0)
    prototypes = {id(w) for w in model.projector.layers[-1].trainable_weights}
    for variable, start in zip(model.trainable_variables, before, strict=True):
        step = np.linalg.norm(variable.numpy() - start)
        if id(variable) in prototypes:
            assert step == 0, variable.path  # Frozen for the first epoch.
        else:
            # No step is longer than lr * clip; a gradient longer than the clip is cut to it
            # (DINO's factor is clip / (norm + 1e-6): within 1e-4 for a norm of 0.01 or more).
            assert step <= 0.5 * 1e-3 * (1 + 1e-6), variable.path
            if step > 1e-4:
                assert step == pytest.approx(0.5 * 1e-3, rel=1e-4), variable.path
    assert (
        sum(
            np.linalg.norm(v.numpy() - b) > 1e-4
            for v, b in zip(model.trainable_variables, before, strict=True)
        )
        > 5
    )


def _no_scope():
    import contextlib

    return contextlib.nullcontext()


def test_the_optimizer_never_sees_the_teacher_even_after_unfreezing():
    model = teacher_model("byol")
    teacher = {id(w) for w in model.teacher_backbone.weights + model.teacher_projector.weights}
    model.trainable = False
    model.trainable = True  # Keras marks every variable trainable again.
    assert not teacher & {id(v) for v in model.trainable_variables}
    assert not teacher & {id(v) for v in model.trainable_weights}
    assert teacher <= {id(v) for v in model.non_trainable_weights}
    assert len(model.trainable_weights) + len(model.non_trainable_weights) == len(model.weights)


def test_the_schedule_reads_fits_positional_arguments_in_keras_order():
    # fit(x, y, batch_size, epochs): 8 packed view pairs in batches of 4 for 3 epochs.
    view1, view2 = views(0, 8)
    model = teacher_model("byol")
    model.compile(optimizer="sgd")
    model.fit(np.stack([view1, view2], axis=1), None, 4, 3, verbose=0)
    assert model.schedule_steps.numpy().tolist() == [6, 2]
    model = teacher_model("byol")
    model.compile(optimizer="sgd")
    model.fit(view_batches(2), None, None, 3, verbose=0)
    assert model.schedule_steps.numpy().tolist() == [6, 2]


def test_dino_refuses_epoch_options_it_cannot_count_on_data_of_unknown_length():
    unknown_length = view_batches(2).filter(lambda a, b: True)
    model = teacher_model("dino", total_steps=4)
    model.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="warmup_teacher_temperature_epochs=1 count epochs"):
        model.fit(unknown_length, verbose=0)
    # With the epoch's length given, or without epoch options, it trains.
    model.fit(unknown_length, steps_per_epoch=2, verbose=0)
    assert model.schedule_steps.numpy().tolist() == [4, 2]
    options = {"warmup_teacher_temperature_epochs": 0, "freeze_last_layer_epochs": 0}
    model = teacher_model("dino", total_steps=4, algorithm_options=options)
    model.compile(optimizer="sgd")
    model.fit(unknown_length, verbose=0)
    assert model.schedule_steps.numpy().tolist() == [4, 0]
