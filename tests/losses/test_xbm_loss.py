"""XBM: the memory and the loss over several steps vs a float64 loop, and under fit at K=2."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import (
    XBM,
    ArcFaceLoss,
    MultiNegativesRankLoss,
    MultiSimilarityLoss,
    TripletLoss,
)
from tensorflow_similarity.testing import mirrored_strategy
from tests.losses import metric_reference

INNER = {
    "triplet": (
        lambda: TripletLoss(margin=0.2),
        lambda labels, x, anchors: metric_reference.triplet_terms(
            labels, x, "cosine", "hard", "semi-hard", 0.2, anchors=anchors
        ),
    ),
    "multisim": (
        lambda: MultiSimilarityLoss(beta=10.0, epsilon=0.5),
        lambda labels, x, anchors: metric_reference.multisim_terms(
            labels, x, "cosine", 2.0, 10.0, 0.5, 0.5, 1.0, anchors=anchors
        ),
    ),
}


def _batches(sizes, seed=0, dim=4, classes=3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim))
    batches = []
    for size in sizes:
        labels = rng.integers(0, classes, size=size)
        batches.append((labels, centres[labels] + 0.8 * rng.normal(size=(size, dim))))
    return batches


def _memory(loss):
    labels, embeddings = loss.memory()
    return labels.numpy(), embeddings.numpy()


@pytest.mark.parametrize("inner", sorted(INNER))
@pytest.mark.parametrize(
    ("sizes", "memory_size", "warmup_steps"),
    [((4, 4, 4, 4, 4), 10, 0), ((5, 3, 4, 6, 4), 9, 2), ((4, 12, 3), 8, 0)],
    ids=["wraps", "warmup-unequal", "batch-larger-than-memory"],
)
def test_memory_and_terms_match_the_loop_reference(inner, sizes, memory_size, warmup_steps):
    make_inner, reference_terms = INNER[inner]
    loss = XBM(make_inner(), memory_size, warmup_steps, reduction="none", dtype="float64")
    batches = _batches(sizes, seed=len(sizes) + memory_size)

    expected = metric_reference.xbm_steps(batches, memory_size, warmup_steps, reference_terms)

    changed = 0.0
    for step, ((labels, x), (terms, memory_labels, memory_x)) in enumerate(
        zip(batches, expected, strict=True)
    ):
        got = loss(labels, x).numpy()
        np.testing.assert_allclose(got, terms, rtol=1e-9, atol=1e-12, err_msg=f"step {step}")
        got_labels, got_x = _memory(loss)
        np.testing.assert_array_equal(got_labels, memory_labels, err_msg=f"step {step}")
        np.testing.assert_allclose(got_x, memory_x, rtol=1e-12, err_msg=f"step {step}")
        if step < warmup_steps:
            assert len(got_labels) == 0
            # Warm-up: the wrapped loss of the batch alone.
            np.testing.assert_allclose(got, reference_terms(labels, x, None), rtol=1e-9)
        changed = max(changed, np.abs(got - reference_terms(labels, x, None)).max())
    assert len(got_labels) == memory_size  # full, and wrapped around
    assert changed > 1e-3, "the memory changed no anchor's term"


def test_mean_reduction_is_the_mean_of_the_terms_and_memory_has_no_gradient():
    (labels0, x0), (labels1, x1) = _batches((6, 6), seed=3)
    loss = XBM(TripletLoss(margin=0.2), memory_size=12)
    terms_loss = XBM(TripletLoss(margin=0.2), memory_size=12, reduction="none")
    for current in (loss, terms_loss):
        current(labels0, x0)
    x = tf.Variable(x1, dtype="float32")
    with tf.GradientTape() as tape:
        value = loss(labels1, x)
    grad = tape.gradient(value, x).numpy()
    np.testing.assert_allclose(value.numpy(), terms_loss(labels1, x1).numpy().mean(), rtol=1e-6)

    # The same terms with the previous batch as constant keys.
    inner = TripletLoss(margin=0.2)
    with tf.GradientTape() as tape:
        keys = tf.concat([tf.cast(x, "float32"), tf.constant(x0, "float32")], axis=0)
        labels = tf.constant(np.concatenate([labels1, labels0]), tf.int64)
        expected = tf.reduce_mean(inner.per_anchor_loss(labels[:6], x, labels, keys))
    np.testing.assert_allclose(grad, tape.gradient(expected, x).numpy(), rtol=1e-5, atol=1e-7)
    assert np.abs(grad).max() > 1e-3


def test_config_round_trip_and_registration(tmp_path):
    loss = XBM(TripletLoss(distance="l2", margin=0.3), memory_size=32, warmup_steps=5)
    config = keras.saving.serialize_keras_object(loss)
    assert config["registered_name"] == "Similarity>XBM"

    restored = keras.saving.deserialize_keras_object(config)

    assert isinstance(restored, XBM) and isinstance(restored.loss, TripletLoss)
    assert restored.get_config() == loss.get_config()
    assert (restored.memory_size, restored.warmup_steps, restored.loss.margin) == (32, 5, 0.3)

    inputs = keras.Input((5,))
    model = keras.Model(inputs, keras.layers.Dense(4)(inputs))
    model.compile(optimizer="sgd", loss=loss)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert loaded.loss.get_config() == loss.get_config()


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="XBM wraps a MetricLoss that mines pairs"):
        XBM(ArcFaceLoss(), memory_size=8)
    with pytest.raises(ValueError, match="XBM wraps a MetricLoss that mines pairs"):
        XBM(MultiNegativesRankLoss(), memory_size=8)
    with pytest.raises(ValueError, match="memory_size must be a positive integer"):
        XBM(TripletLoss(), memory_size=0)
    with pytest.raises(ValueError, match="warmup_steps must be a non-negative integer"):
        XBM(TripletLoss(), memory_size=8, warmup_steps=-1)


def test_rejects_a_memory_created_outside_the_strategy():
    loss = XBM(TripletLoss(), memory_size=8)
    strategy = mirrored_strategy(2)
    labels, x = _batches((4,))[0]

    with pytest.raises(ValueError, match="outside this strategy's scope"):
        strategy.run(lambda: loss(labels, tf.constant(x, "float32")))
    assert int(loss.steps.numpy()) == 0


IN_DIM, OUT_DIM, BATCH, STEPS, LEARNING_RATE = 5, 4, 8, 3, 0.5


def _fit_data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(STEPS * BATCH, IN_DIM)).astype("float32")
    # In each batch the two replicas' halves hold the same labels: every
    # anchor's in-batch positive is on the other replica.
    labels = np.tile(np.arange(BATCH // 2), 2 * STEPS).astype("int64")
    kernel = rng.normal(size=(IN_DIM, OUT_DIM)).astype("float32")
    return x, labels, kernel


def _one_device_steps(make_loss, x, labels, kernel):
    """Returns each step's loss, the final kernel, the memory, and the losses without it."""
    loss = make_loss()
    kernel = tf.Variable(kernel)
    values, without_memory = [], []
    for step in range(STEPS):
        rows = slice(step * BATCH, (step + 1) * BATCH)
        with tf.GradientTape() as tape:
            embeddings = tf.matmul(x[rows], kernel)
            value = loss(labels[rows], embeddings)
        without_memory.append(float(loss.loss(labels[rows], embeddings)))
        kernel.assign_sub(LEARNING_RATE * tape.gradient(value, kernel))
        values.append(float(value))
    return values, kernel.numpy(), _memory(loss), without_memory


class _StepLosses(keras.callbacks.Callback):
    """Each step's loss, from the running mean Keras logs."""

    def on_train_begin(self, logs=None):
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(logs["loss"])

    def values(self):
        totals = np.array(self.means) * np.arange(1, len(self.means) + 1)
        return np.diff(totals, prepend=0.0)


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("inner", sorted(INNER))
def test_fit_matches_the_one_device_loop_over_three_steps(inner, k):
    """At k=2 under a MirroredStrategy; at k=1 fit's graph vs the eager loop."""
    make_inner = INNER[inner][0]

    def make_loss():
        return XBM(make_inner(), memory_size=12)

    x, labels, kernel = _fit_data()
    strategy = mirrored_strategy(k) if k > 1 else tf.distribute.get_strategy()
    with strategy.scope():
        inputs = keras.Input((IN_DIM,))
        dense = keras.layers.Dense(OUT_DIM, use_bias=False)
        model = keras.Model(inputs, dense(inputs))
        dense.kernel.assign(kernel)
        loss = make_loss()
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE), loss=loss)
    steps = _StepLosses()
    model.fit(x, labels, batch_size=BATCH, shuffle=False, verbose=0, callbacks=[steps])

    expected_values, expected_kernel, (expected_labels, expected_x), without_memory = (
        _one_device_steps(make_loss, x, labels, kernel)
    )
    assert min(expected_values) > 1e-3
    assert np.abs(np.subtract(expected_values, without_memory)[1:]).max() > 1e-4
    np.testing.assert_allclose(steps.values(), expected_values, rtol=1e-5)
    np.testing.assert_allclose(dense.kernel.numpy(), expected_kernel, rtol=1e-5, atol=1e-6)
    assert np.abs(expected_kernel - kernel).max() > 1e-3
    # Step 3 wrapped around: 8 + 8 + 8 pairs seen, the newest 12 kept.
    assert int(loss.steps.numpy()) == STEPS and len(expected_labels) == 12
    copies = zip(
        *(
            strategy.experimental_local_results(variable)
            for variable in (
                loss.memory_labels,
                loss.memory_embeddings,
                loss.steps,
                loss.memory_count,
            )
        ),
        strict=True,
    )
    assert len(strategy.experimental_local_results(loss.steps)) == k
    for replica_labels, replica_x, replica_steps, replica_count in copies:
        assert int(replica_steps) == STEPS and int(replica_count) == 12
        np.testing.assert_array_equal(replica_labels.numpy(), expected_labels)
        np.testing.assert_allclose(
            replica_x.numpy().reshape(12, OUT_DIM), expected_x, rtol=1e-5, atol=1e-6
        )


def test_positional_arguments_bind_as_in_017():
    # 0.17: XBM(loss, memory_size, warmup_steps, reduction, name).
    loss = XBM(TripletLoss(), 8, 2, "none", "my_xbm")
    assert (loss.memory_size, loss.warmup_steps) == (8, 2)
    assert (loss.reduction, loss.name) == ("none", "my_xbm")
    labels = np.array([0, 0, 1, 1])
    embeddings = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    assert loss(labels, embeddings).shape == (4,)
    assert XBM(TripletLoss(), 8).name == "XBM"
    restored = XBM.from_config(loss.get_config())
    assert (restored.reduction, restored.name, restored.warmup_steps) == ("none", "my_xbm", 2)
