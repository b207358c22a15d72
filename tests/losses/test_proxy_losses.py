"""ProxyAnchorLoss and ProxyNCALoss: float64 loop references, replica parity, proxies in a model."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.layers import MetricEmbedding
from tensorflow_similarity.losses import ProxyAnchorLoss, ProxyNCALoss, proxy_anchor_loss
from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.testing import assert_replica_parity, mirrored_strategy, replica_parity
from tests.losses import metric_reference

BATCH, DIM, CLASSES = 14, 4, 6
SEEDED = {"proxy_initializer": keras.initializers.RandomNormal(seed=5), "dtype": "float64"}


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    # Class 5 has no sample: a proxy without positives, still pushed by the negatives.
    labels = rng.integers(0, CLASSES - 1, size=BATCH)
    return labels, rng.normal(size=(BATCH, DIM))


def _anchor(**kwargs):
    # alpha 4 keeps every exponential term of the same order: a finite-difference check sees them.
    return ProxyAnchorLoss(CLASSES, DIM, **{"margin": 0.1, "alpha": 4.0, **SEEDED, **kwargs})


def _nca(**kwargs):
    return ProxyNCALoss(CLASSES, DIM, **{"temperature": 0.5, **SEEDED, **kwargs})


def _reference(loss, labels, x, proxies):
    if isinstance(loss, ProxyAnchorLoss):
        return metric_reference.proxy_anchor_loss(labels, x, proxies, loss.margin, loss.alpha)
    return float(np.mean(metric_reference.proxy_nca_terms(labels, x, proxies, loss.temperature)))


def _finite_difference(f, value, step=1e-6):
    gradient = np.zeros_like(value)
    for index in np.ndindex(*value.shape):
        up, down = value.copy(), value.copy()
        up[index] += step
        down[index] -= step
        gradient[index] = (f(up) - f(down)) / (2 * step)
    return gradient


@pytest.mark.parametrize("make", [_anchor, _nca], ids=["anchor", "nca"])
def test_value_and_gradients_match_the_float64_loop_reference(make):
    labels, x = _inputs()
    loss = make()
    proxies = loss.proxies.numpy()
    embeddings = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(embeddings)
        value = loss(labels, embeddings)
    grad_x, grad_p = tape.gradient(value, [embeddings, loss.proxies])

    np.testing.assert_allclose(float(value), _reference(loss, labels, x, proxies), rtol=1e-12)
    expected_x = _finite_difference(lambda v: _reference(loss, labels, v, proxies), x)
    expected_p = _finite_difference(lambda v: _reference(loss, labels, x, v), proxies)
    np.testing.assert_allclose(grad_x.numpy(), expected_x, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(grad_p), expected_p, rtol=1e-6, atol=1e-8)
    assert np.abs(expected_p).max() > 1e-2, "degenerate case: the proxies get no gradient"


def test_proxy_nca_terms_match_the_reference_per_sample():
    labels, x = _inputs(1)
    loss = _nca(reduction="none", temperature=1.0 / 9.0)
    expected = metric_reference.proxy_nca_terms(labels, x, loss.proxies.numpy(), 1.0 / 9.0)
    np.testing.assert_allclose(loss(labels, x).numpy(), expected, rtol=1e-12, atol=1e-12)


def test_proxy_anchor_is_exact_where_its_exponentials_overflow():
    labels, x = _inputs(2)
    # e^(2000 * 1.1) overflows float64; the sums shifted by their largest exponent do not.
    loss = _anchor(alpha=2000.0)
    expected = metric_reference.proxy_anchor_loss(labels, x, loss.proxies.numpy(), 0.1, 2000.0)

    np.testing.assert_allclose(float(loss(labels, x)), expected, rtol=1e-12)


# The mean on 2, 4 and 8 replicas is checked with every loss in test_replica_parity.py.
@pytest.mark.parametrize(
    "make", [lambda: _anchor(reduction="sum"), lambda: _nca(reduction="none")], ids=["sum", "none"]
)
def test_the_other_reductions_keep_the_contract_on_replicas(make):
    labels, x = _inputs(4)
    assert_replica_parity(make(), labels, x, replicas=(4,))


def test_the_parity_check_sees_proxy_anchor_counting_on_each_replica_alone(monkeypatch):
    labels, x = _inputs(3)
    monkeypatch.setattr(proxy_anchor_loss, "sync_replica_context", lambda: None)
    monkeypatch.setattr(proxy_anchor_loss, "global_sum", lambda value: value)

    (wrong,) = replica_parity(_anchor(), labels, x, replicas=(2,))

    assert wrong.value_error > 1e-3 and wrong.gradient_error > 1e-3


class _ProxyGradientTimesReplicas(ProxyNCALoss):
    """The right value and embedding gradients, the proxies' gradient K times too large."""

    def proxies_like(self, embeddings):
        proxies = super().proxies_like(embeddings)
        k = tf.distribute.get_replica_context().num_replicas_in_sync
        return k * proxies - tf.stop_gradient((k - 1) * proxies)


def test_the_parity_check_compares_the_gradients_of_the_proxies():
    labels, x = _inputs(3)
    loss = _ProxyGradientTimesReplicas(CLASSES, DIM, temperature=0.5, **SEEDED)

    (wrong,) = replica_parity(loss, labels, x, replicas=(2,))

    assert wrong.value_error < 1e-12 and wrong.gradient_error > 1e-3


def test_labels_past_the_class_count_are_refused_before_any_work():
    labels, x = _inputs()
    bad = labels.copy()
    bad[3] = CLASSES
    for loss in (_anchor(), _nca()):
        with pytest.raises(ValueError, match=r"num_classes=6 proxies.*Labels outside: \[6\]"):
            loss(bad, x)
        with pytest.raises(ValueError, match="Labels outside: \\[-1\\]"):
            loss(np.where(labels == 0, -1, labels), x)
        step = tf.function(lambda y, z, loss=loss: loss(y, z))
        with pytest.raises(tf.errors.InvalidArgumentError, match="num_classes=6 proxies"):
            step(tf.constant(bad), tf.constant(x))


def test_bad_arguments_and_embedding_sizes_are_named():
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2"):
        ProxyAnchorLoss(1, DIM)
    with pytest.raises(ValueError, match="embedding_size must be a positive integer"):
        ProxyNCALoss(CLASSES, 0)
    with pytest.raises(ValueError, match="margin must be a finite number in"):
        ProxyAnchorLoss(CLASSES, DIM, margin=-0.1)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        ProxyNCALoss(CLASSES, DIM, temperature=0.0)
    with pytest.raises(ValueError, match="no per-sample terms"):
        ProxyAnchorLoss(CLASSES, DIM, reduction="none")
    labels, x = _inputs()
    with pytest.raises(ValueError, match="embedding_size=5, and received embeddings of shape"):
        ProxyNCALoss(CLASSES, 5)(labels, x)


def test_defaults_are_the_papers_and_the_config_round_trips():
    anchor, nca = ProxyAnchorLoss(10, 8), ProxyNCALoss(10, 8)

    assert (anchor.margin, anchor.alpha) == (0.1, 32.0)
    assert nca.temperature == pytest.approx(1.0 / 9.0)
    assert anchor.proxies.shape == (10, 8) and anchor.trainable_weights == [anchor.proxies]
    for loss in (anchor, nca, _anchor(reduction="sum")):
        copy = type(loss).from_config(loss.get_config())
        assert copy.get_config() == loss.get_config()
    assert keras.saving.get_registered_name(ProxyAnchorLoss) == "Similarity>ProxyAnchorLoss"


def test_a_loss_made_outside_the_strategy_scope_is_refused_on_replicas():
    strategy = mirrored_strategy(2)
    loss = _nca()
    labels, x = _inputs()

    with pytest.raises(ValueError, match="outside this strategy's scope"):
        strategy.run(lambda: loss(labels[:4], x[:4]))


@pytest.mark.parametrize(
    "make",
    [
        lambda: ProxyAnchorLoss(CLASSES, 8),
        lambda: ProxyNCALoss(CLASSES, 8),
    ],
    ids=["anchor", "nca"],
)
def test_proxies_train_save_load_and_keep_training_with_a_similarity_model(make, tmp_path):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(24, 5)).astype("float32")
    y = np.arange(24) % CLASSES
    with mirrored_strategy(2).scope():
        inputs = keras.Input((5,))
        model = SimilarityModel(inputs, MetricEmbedding(8)(inputs))
        loss = make()
        model.compile(keras.optimizers.SGD(0.5), loss=loss)
    before = loss.proxies.numpy().copy()
    model.fit(x, y, batch_size=12, epochs=1, verbose=0)
    trained = loss.proxies.numpy()
    assert np.abs(trained - before).max() > 1e-4, "fit did not move the proxies"
    path = str(tmp_path / "model.keras")
    model.save(path)

    loaded = keras.saving.load_model(path)
    restored = loaded.loss.proxies
    np.testing.assert_array_equal(restored.numpy(), trained)
    assert any(w is restored for w in loaded.trainable_weights)
    loaded.fit(x, y, batch_size=12, epochs=1, verbose=0)
    assert np.abs(restored.numpy() - trained).max() > 1e-4


def test_fit_refuses_labels_past_the_class_count_before_training(monkeypatch):
    inputs = keras.Input((5,))
    model = SimilarityModel(inputs, MetricEmbedding(8)(inputs))
    model.compile("sgd", loss=ProxyNCALoss(CLASSES, 8))
    monkeypatch.setattr(keras.Model, "fit", pytest.fail)

    with pytest.raises(ValueError, match=r"num_classes=6 proxies.*Labels outside: \[6, 7\]"):
        model.fit(np.zeros((8, 5), "float32"), np.arange(8), verbose=0)
