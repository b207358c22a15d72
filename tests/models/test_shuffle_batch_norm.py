"""Shuffle batch norm: the key encoder's batch permuted across replicas and restored.

The exactness reference is one device that runs the same permutation with
batch norm over each replica's share, written out step by step in float64:
the student's batch norm over each replica's rows, the teacher's over each
share of the permuted batch, its outputs put back in order, the loss of the
global batch, the optimizer step and the momentum update.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import losses
from tensorflow_similarity.collectives import gather_global_batch
from tensorflow_similarity.models import ContrastiveModel, create_contrastive_model
from tensorflow_similarity.models.momentum import cosine_momentum
from tensorflow_similarity.models.shuffle_batch_norm import (
    batch_shuffle_permutation,
    shuffle_across_replicas,
)
from tensorflow_similarity.testing import count_collectives, mirrored_strategy, run_on_replicas

FEATURES = 6
STEPS = 3
GLOBAL_BATCH = 8
SEED = 5


def dense_backbone() -> keras.Model:
    inputs = keras.Input((FEATURES,))
    x = keras.layers.Dense(8)(inputs)
    x = keras.layers.BatchNormalization()(x)
    return keras.Model(inputs, keras.layers.ReLU()(x), name="backbone")


def dense_model(algorithm="mocov3", **kwargs) -> ContrastiveModel:
    keras.utils.set_random_seed(1)
    return create_contrastive_model(
        dense_backbone(),
        algorithm,
        projector_hidden_dim=8,
        projector_output_dim=4,
        predictor_hidden_dim=8,
        **kwargs,
    )


def view_data(seed=0):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(STEPS * GLOBAL_BATCH, FEATURES))
    return base + 0.3 * rng.normal(size=base.shape), base + 0.3 * rng.normal(size=base.shape)


def optimizer():
    return keras.optimizers.SGD(learning_rate=0.3, momentum=0.9)


def reference_run(model, view1, view2, replicas):
    """One device, the steps of `replicas` replicas with shuffle batch norm, written out."""
    opt = optimizer()
    student = model.trainable_variables
    teachers, followed = model.teacher_pairs()
    loss = losses.MoCoV3Loss()
    share = GLOBAL_BATCH // replicas

    def per_share(fn, x):
        return tf.concat([fn(x[k * share : (k + 1) * share]) for k in range(replicas)], 0)

    def student_net(x):
        return model.predictor(
            model.projector(model.backbone(x, training=True), training=True), training=True
        )

    def teacher_net(x):
        h = model.teacher_backbone(x, training=True)
        return model.teacher_projector(h, training=True)

    step_losses = []
    for step in range(STEPS):
        rows = slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
        v1, v2 = tf.constant(view1[rows]), tf.constant(view2[rows])
        permutation = batch_shuffle_permutation(GLOBAL_BATCH, step, SEED).numpy()
        restore = np.argsort(permutation)
        t1 = tf.gather(per_share(teacher_net, tf.gather(v1, permutation)), restore)
        t2 = tf.gather(per_share(teacher_net, tf.gather(v2, permutation)), restore)
        with tf.GradientTape() as tape:
            p1, p2 = per_share(student_net, v1), per_share(student_net, v2)
            value = loss(t2, p1) + loss(t1, p2)
        opt.apply_gradients(zip(tape.gradient(value, student), student, strict=True))
        m = float(cosine_momentum(tf.constant(float(step), tf.float64), STEPS, 0.5))
        for t, s in zip(teachers, followed, strict=True):
            t.assign(m * t + (1 - m) * s)
        step_losses.append(float(value))
    return step_losses


def trained_weights(model):
    teachers, _ = model.teacher_pairs()
    return [v.numpy() for v in model.trainable_variables + teachers]


@pytest.mark.usefixtures("float64")
def test_two_replicas_match_one_device_running_the_same_permutation():
    view1, view2 = view_data()
    options = {"momentum": 0.5, "total_steps": STEPS, "shuffle_seed": SEED}
    reference = dense_model(bn="per_replica", **options)
    expected_losses = reference_run(reference, view1, view2, replicas=2)
    with mirrored_strategy(2).scope():
        model = dense_model(bn="shuffle", **options)
        model.compile(optimizer=optimizer())
    data = tf.data.Dataset.from_tensor_slices((view1, view2)).batch(GLOBAL_BATCH)
    history = model.fit(data, epochs=1, verbose=0).history
    # The loss metric is a float32 tracker; the weights are float64 throughout.
    np.testing.assert_allclose(history["loss"][0], np.mean(expected_losses), rtol=1e-6)
    got, expected = trained_weights(model), trained_weights(reference)
    assert len(got) == len(expected)
    for value, wanted in zip(got, expected, strict=True):
        np.testing.assert_allclose(value, wanted, rtol=0, atol=1e-12)


def numpy_share_normalised(x, sizes, permutation):
    """Plain loops: each replica's share of the permuted rows standardised, restored."""
    shuffled_out = np.zeros_like(x)
    start = 0
    for size in sizes:
        share = [permutation[p] for p in range(start, start + size)]
        for column in range(x.shape[1]):
            values = [x[row, column] for row in share]
            mean = sum(values) / size
            variance = sum((v - mean) ** 2 for v in values) / size
            for p, value in zip(range(start, start + size), values, strict=True):
                shuffled_out[p, column] = (value - mean) / np.sqrt(variance + 1e-3)
        start += size
    restored = np.zeros_like(x)
    for p, row in enumerate(permutation):
        restored[row] = shuffled_out[p]
    return restored


def standardise(x):
    mean = tf.reduce_mean(x, 0)
    return ((x - mean) / tf.sqrt(tf.reduce_mean(tf.square(x - mean), 0) + 1e-3),)


@pytest.mark.parametrize("sizes", [[3, 5], [4, 4, 4, 4]])
def test_each_replica_gets_its_rows_normalised_within_a_shuffled_share(sizes):
    x = np.random.default_rng(2).normal(size=(sum(sizes), 3))
    run = run_on_replicas(lambda t: shuffle_across_replicas(standardise, (t,), 4, 9), x, sizes)
    permutation = batch_shuffle_permutation(sum(sizes), 4, 9).numpy()
    expected = numpy_share_normalised(x, sizes, permutation)
    np.testing.assert_allclose(run.concatenated(lambda r: r[0]), expected, atol=1e-12)
    unshuffled = numpy_share_normalised(x, sizes, np.arange(sum(sizes)))
    assert not np.allclose(expected, unshuffled)  # The test can tell a missing shuffle.


def test_two_collectives_per_call_whatever_the_batch_norm_layers():
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")

    def deep(a, b):
        for _ in range(3):
            (a,) = standardise(a)
        return (a, 2.0 * b)

    one_gather = run_on_replicas(lambda t: gather_global_batch(t), x, [4, 4])
    shuffled = run_on_replicas(lambda t: shuffle_across_replicas(deep, (t, t + 1), 0), x, [4, 4])
    assert count_collectives(shuffled.function) == 2 * count_collectives(one_gather.function)


def test_permutation_is_reproducible_and_moves_with_step_and_seed():
    first = batch_shuffle_permutation(16, 3, 1).numpy()
    assert sorted(first) == list(range(16))
    np.testing.assert_array_equal(first, batch_shuffle_permutation(16, 3, 1).numpy())
    assert not np.array_equal(first, batch_shuffle_permutation(16, 4, 1).numpy())
    assert not np.array_equal(first, batch_shuffle_permutation(16, 3, 2).numpy())


@pytest.mark.parametrize(
    ("sync_bn", "bn", "mode"),
    [(None, None, "per_replica"), (False, None, "per_replica"), (True, None, "sync")],
)
def test_sync_bn_is_the_other_spelling_of_bn(sync_bn, bn, mode):
    model = dense_model("byol", sync_bn=sync_bn, bn=bn)
    assert model.bn == mode
    assert (model.sync_bn is not None) == (mode == "sync")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bn": "global"}, "use one of 'per_replica', 'sync', 'shuffle'"),
        ({"bn": "sync", "sync_bn": False}, "contradict each other"),
        ({"bn": "per_replica", "sync_bn": True}, "contradict each other"),
        ({"bn": "shuffle", "sync_bn": True}, "contradict each other"),
    ],
)
def test_bad_batch_norm_modes_fail_before_anything_is_built(kwargs, message, monkeypatch):
    backbone = dense_backbone()

    def no_build(*args, **kw):
        raise AssertionError("a head was built")

    monkeypatch.setattr(keras.layers.Dense, "__init__", no_build)
    with pytest.raises(ValueError, match=message):
        create_contrastive_model(backbone, "mocov3", **kwargs)


def test_shuffle_is_refused_for_a_method_without_a_key_encoder():
    with pytest.raises(ValueError, match=r"SimCLR has none.*byol.*mocov3"):
        dense_model("simclr", bn="shuffle")


def test_shuffle_on_one_replica_is_refused_before_training():
    model = dense_model("byol", bn="shuffle")
    model.compile(optimizer=optimizer())
    view1, view2 = view_data()
    with pytest.raises(ValueError, match="one replica.*2 or more replicas"):
        model.fit(tf.data.Dataset.from_tensor_slices((view1, view2)).batch(8), verbose=0)
    assert int(model.optimizer.iterations) == 0


def test_the_mode_and_seed_survive_save_and_load(tmp_path):
    model = dense_model("mocov3", bn="shuffle", shuffle_seed=7)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert (loaded.bn, loaded.shuffle_seed, loaded.sync_bn) == ("shuffle", 7, None)
    old = {k: v for k, v in model.get_config().items() if k not in ("bn", "shuffle_seed")}
    assert ContrastiveModel.from_config(old).bn == "per_replica"
