"""The self-supervised losses under Keras' `fit` and their input checks.

Their parity with one device on 2, 4 and 8 replicas, for every reduction, is
in `test_replica_parity.py`.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.losses import Barlow, GlobalBatchLoss, SimCLRLoss, SimSiamLoss, VicReg
from tensorflow_similarity.testing import assert_replica_parity, mirrored_strategy

IN_DIM, OUT_DIM = 3, 4

LOSSES = {
    "simsiam": lambda: SimSiamLoss(),
    "simclr": lambda: SimCLRLoss(temperature=0.3),
    "barlow": lambda: Barlow(lambda_=0.05),
    # gamma above the features' std keeps every variance hinge active.
    "vicreg": lambda: VicReg(gamma=4.0),
}


def _data(total: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=(total, IN_DIM)).astype("float32")
    x2 = (x1 + 0.5 * rng.normal(size=(total, IN_DIM))).astype("float32")
    kernel = rng.normal(size=(IN_DIM, OUT_DIM)).astype("float32")
    return x1, x2, kernel


def _projector(kernel: np.ndarray) -> keras.layers.Dense:
    dense = keras.layers.Dense(OUT_DIM, use_bias=False)
    dense.build((None, IN_DIM))
    dense.kernel.assign(kernel)
    return dense


class _TwoViewModel(keras.Model):
    """A minimal two-view model whose compute_loss calls the loss as the SSL models do."""

    def __init__(self, loss_object, **kwargs):
        super().__init__(**kwargs)
        self.projector = keras.layers.Dense(OUT_DIM, use_bias=False)
        self.loss_object = loss_object

    def call(self, inputs):
        return self.projector(inputs[:, 0]), self.projector(inputs[:, 1])

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return self.loss_object(*y_pred)


def _fit_one_step(loss, views, kernel, strategy):
    with strategy.scope():
        model = _TwoViewModel(loss, name="two_view_model")
        model.projector.build((None, IN_DIM))
        model.projector.kernel.assign(kernel)
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1))
    history = model.fit(views, batch_size=len(views), epochs=1, shuffle=False, verbose=0)
    return history.history["loss"][0], model.projector.kernel.numpy()


def test_keras_fit_under_mirrored_strategy_matches_single_device():
    x1, x2, kernel = _data(8, seed=11)
    views = np.stack([x1, x2], axis=1)
    loss = SimCLRLoss(temperature=0.3)

    expected_loss, expected_kernel = _fit_one_step(
        loss, views, kernel, tf.distribute.get_strategy()
    )
    fit_loss, fit_kernel = _fit_one_step(loss, views, kernel, mirrored_strategy(2))

    np.testing.assert_allclose(fit_loss, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(fit_kernel, expected_kernel, rtol=1e-4, atol=1e-6)
    assert np.abs(expected_kernel - kernel).max() > 1e-3


NON_DEFAULT = {
    "simsiam": lambda: SimSiamLoss(name="siam", reduction="sum", dtype="float64"),
    "simclr": lambda: SimCLRLoss(temperature=0.25, name="clr", reduction="none"),
    "barlow": lambda: Barlow(lambda_=0.02, epsilon=1e-3, name="twins", dtype="float64"),
    "vicreg": lambda: VicReg(lambda_=10.0, mu=5.0, nu=2.0, gamma=0.5, epsilon=1e-3, name="vr"),
}
NEEDS_TWO_SAMPLES = ["simclr", "barlow", "vicreg"]


def _views(shape=(6, 4), seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape).astype("float32"), rng.normal(size=shape).astype("float32")


@pytest.mark.parametrize("loss_name", sorted(NON_DEFAULT))
def test_config_round_trip(loss_name):
    loss = NON_DEFAULT[loss_name]()
    z1, z2 = _views()

    clone = type(loss).from_config(loss.get_config())
    serialized = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(serialized)

    assert serialized["registered_name"] == f"Similarity>{type(loss).__name__}"
    for other in (clone, restored):
        assert type(other) is type(loss)
        assert other.get_config() == loss.get_config()
        np.testing.assert_allclose(other(z1, z2).numpy(), loss(z1, z2).numpy(), rtol=1e-6)


@pytest.mark.parametrize("loss_name", sorted(NON_DEFAULT))
def test_compiled_loss_survives_keras_file(loss_name, tmp_path):
    loss = NON_DEFAULT[loss_name]()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=loss)
    model.save(tmp_path / "model.keras")

    loaded = keras.saving.load_model(tmp_path / "model.keras")

    assert type(loaded.loss) is type(loss)
    assert loaded.loss.get_config() == loss.get_config()


@pytest.mark.parametrize(
    ("shape1", "shape2", "match"),
    [
        ((4, 3), (5, 3), "same shape"),
        ((4, 3), (4, 2), "same shape"),
        ((4,), (4,), r"\[batch, features\]"),
        ((4, 3, 2), (4, 3, 2), r"\[batch, features\]"),
    ],
)
def test_rejects_bad_view_shapes(shape1, shape2, match):
    for make_loss in LOSSES.values():
        with pytest.raises(ValueError, match=match):
            make_loss()(np.ones(shape1, "float32"), np.ones(shape2, "float32"))


def test_rejects_a_batch_of_one_except_simsiam():
    for name in NEEDS_TWO_SAMPLES:
        with pytest.raises(ValueError, match="at least 2 samples"):
            LOSSES[name]()(*_views(shape=(1, 4)))

    p, z = np.array([[1.0, 0.0]], "float32"), np.array([[1.0, 1.0]], "float32")
    np.testing.assert_allclose(SimSiamLoss()(p, z).numpy(), -np.sqrt(0.5), rtol=1e-6)


@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_checks_dynamic_shapes_at_run_time(loss_name):
    loss = LOSSES[loss_name]()
    spec = tf.TensorSpec((None, 4), tf.float32)
    compute = tf.function(loss, input_signature=[spec, spec])

    assert np.isfinite(compute(*_views(shape=(2, 4))).numpy())
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        compute(_views(shape=(3, 4))[0], _views(shape=(5, 4))[1])
    if loss_name in NEEDS_TWO_SAMPLES:
        with pytest.raises(tf.errors.InvalidArgumentError, match="at least 2 samples"):
            compute(*_views(shape=(1, 4)))


def test_rejects_sample_weight_and_unknown_reductions():
    for make_loss in LOSSES.values():
        loss = make_loss()
        with pytest.raises(ValueError, match="does not accept sample_weight"):
            loss(*_views(), sample_weight=np.ones(6))
        with pytest.raises(ValueError, match="reduction"):
            type(loss)(reduction="max")


def _per_sample(shape_of):
    """A loss of per-sample terms whose `call` returns `shape_of(z)`-shaped terms."""

    class Terms(GlobalBatchLoss):
        def call(self, y_true, y_pred):
            terms = tf.reduce_sum((y_true - y_pred) ** 2, axis=1)
            return shape_of(terms)

    return Terms


BAD_TERMS = {
    "n_by_2": lambda t: tf.stack([t, t], axis=1),
    "n_by_1": lambda t: t[:, None],
    "scalar": tf.reduce_mean,
    "one": lambda t: tf.reduce_mean(t, keepdims=True),
    "n_minus_1": lambda t: t[1:],
}


@pytest.mark.parametrize("bad", sorted(BAD_TERMS))
@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "none"])
def test_rejects_terms_of_another_shape_than_the_batch(bad, reduction):
    loss = _per_sample(BAD_TERMS[bad])(reduction=reduction)

    with pytest.raises(ValueError, match=r"Terms.call returned a tensor of shape .* \[n\] = \[6\]"):
        loss(*_views())


# Shapes a trace leaves unknown: a length beside an unknown batch, and no rank at all.
UNKNOWN_TERMS = {
    "n_minus_1": lambda t: t[1:],
    "unknown_rank_n_by_2": lambda t: tf.py_function(
        lambda a: tf.stack([a, a], axis=1), [t], tf.float32
    ),
}


@pytest.mark.parametrize("bad", sorted(UNKNOWN_TERMS))
def test_rejects_terms_of_another_shape_at_run_time(bad):
    loss = _per_sample(UNKNOWN_TERMS[bad])(reduction="sum")
    spec = tf.TensorSpec((None, 4), tf.float32)
    compute = tf.function(loss, input_signature=[spec, spec])

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Terms.call returned .* \[n\]"):
        compute(*_views())


def test_terms_of_the_batch_pass_the_shape_check_when_unknown():
    loss = _per_sample(lambda t: t)(reduction="sum")
    spec = tf.TensorSpec((None, 4), tf.float32)
    z1, z2 = _views()

    got = tf.function(loss, input_signature=[spec, spec])(z1, z2)

    np.testing.assert_allclose(got.numpy(), np.sum((z1 - z2) ** 2), rtol=1e-6)


def test_rejects_terms_from_a_loss_of_batch_statistics():
    class Statistic(GlobalBatchLoss):
        per_sample_terms = False

        def call(self, y_true, y_pred):
            return tf.reduce_sum((y_true - y_pred) ** 2, axis=1)

    with pytest.raises(ValueError, match=r"Statistic.call returned .* must return the global"):
        Statistic()(*_views())


@pytest.mark.parametrize("bad", ["n_by_2", "n_by_1"])
def test_replica_parity_fails_terms_of_another_shape(bad):
    loss = _per_sample(BAD_TERMS[bad])(reduction="none", dtype="float64")
    z1, z2 = (z.astype("float64") for z in _views(shape=(8, 4)))

    with pytest.raises(ValueError, match=r"Terms.call returned a tensor of shape"):
        assert_replica_parity(loss, z1, z2, replicas=(2,))


def test_replica_parity_fails_a_keras_loss_without_one_term_per_sample():
    class Unreduced(keras.losses.Loss):
        def call(self, y_true, y_pred):
            return (y_true - y_pred) ** 2

    z1, z2 = (z.astype("float64") for z in _views(shape=(8, 4)))

    with pytest.raises(ValueError, match=r"Unreduced returned a value of shape \[8, 4\]"):
        assert_replica_parity(Unreduced(reduction="none"), z1, z2, replicas=(2,))
