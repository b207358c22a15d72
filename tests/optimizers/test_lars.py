"""`LARS` against a float64 loop reference, one device against K replicas, saved and resumed."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.layers import SyncBatchNormalization
from tensorflow_similarity.optimizers import LARS, is_bias_or_norm
from tensorflow_similarity.schedules import WarmupCosineDecay
from tensorflow_similarity.testing import mirrored_strategy

STEPS = 3


def norm(values) -> float:
    total = 0.0
    for value in values:
        total += value * value
    return math.sqrt(total)


def lars_reference(weights, gradients, excluded, lr, momentum, weight_decay, eta):
    """LARS with plain loops: `weights` a list of flat lists, `gradients[step][variable]` too."""
    weights = [list(w) for w in weights]
    velocity = [[0.0] * len(w) for w in weights]
    for step_gradients in gradients:
        for i, (w, g) in enumerate(zip(weights, step_gradients, strict=True)):
            decay = 0.0 if excluded[i] else weight_decay
            trust = 1.0
            if eta is not None and not excluded[i]:
                w_norm, g_norm = norm(w), norm(g)
                if w_norm > 0 and g_norm > 0:
                    trust = eta * w_norm / (g_norm + weight_decay * w_norm)
            for j in range(len(w)):
                d = g[j] + decay * w[j]
                if momentum:
                    velocity[i][j] = momentum * velocity[i][j] - lr * trust * d
                    w[j] = w[j] + velocity[i][j]
                else:
                    w[j] = w[j] - lr * trust * d
    return weights


def sgd_reference(weights, gradients, lr, momentum, weight_decay):
    """Momentum SGD with L2 weight decay on every variable, with plain loops."""
    weights = [list(w) for w in weights]
    velocity = [[0.0] * len(w) for w in weights]
    for step_gradients in gradients:
        for w, g, v in zip(weights, step_gradients, velocity, strict=True):
            for j in range(len(w)):
                v[j] = momentum * v[j] - lr * (g[j] + weight_decay * w[j])
                w[j] += v[j]
    return weights


def dense_bn_model(seed: int = 0) -> keras.Model:
    """Dense -> SyncBatchNormalization -> Dense, in the current dtype policy."""
    init = keras.initializers.GlorotUniform
    return keras.Sequential(
        [
            keras.Input((5,)),
            keras.layers.Dense(4, kernel_initializer=init(seed), bias_initializer="ones"),
            SyncBatchNormalization(),
            keras.layers.Dense(2, kernel_initializer=init(seed + 1)),
        ]
    )


def run_optimizer(optimizer, model, gradients):
    variables = model.trainable_variables
    for step_gradients in gradients:
        optimizer.apply([tf.constant(g, dtype="float64") for g in step_gradients], variables)
    return [v.numpy() for v in variables]


def random_gradients(model, rng, zero_first=False):
    gradients = []
    for step in range(STEPS):
        step_gradients = [rng.normal(size=v.shape) for v in model.trainable_variables]
        if zero_first and step == 0:
            step_gradients[0] = np.zeros_like(step_gradients[0])
        gradients.append(step_gradients)
    return gradients


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("exclude", ["bias_and_norm", [], ["dense_1"]])
@pytest.mark.parametrize("eta", [0.2, None])
def test_against_loop_reference(momentum, exclude, eta):
    # Learning rates are powers of 2: Keras keeps the rate in a float32 variable.
    keras.config.set_dtype_policy("float64")
    model = dense_bn_model()
    rng = np.random.default_rng(1)
    # A zero gradient (trust 1) at step 1; a zero bias (||w|| = 0) in the last Dense.
    gradients = random_gradients(model, rng, zero_first=True)
    optimizer = LARS(0.25, momentum=momentum, weight_decay=0.01, eta=eta, exclude=exclude)
    start = [v.numpy().ravel().tolist() for v in model.trainable_variables]
    got = run_optimizer(optimizer, model, gradients)

    paths = [v.path for v in model.trainable_variables]
    if exclude == "bias_and_norm":
        excluded = [p.endswith(("/bias", "/gamma", "/beta")) for p in paths]
    else:
        excluded = [any(s in p for s in exclude) for p in paths]
    assert excluded == list(optimizer._excluded)
    flat = [[g.ravel().tolist() for g in step] for step in gradients]
    expected = lars_reference(start, flat, excluded, 0.25, momentum, 0.01, eta)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.ravel(), e, rtol=1e-12, atol=1e-14)


def test_no_adaptation_is_momentum_sgd_with_weight_decay():
    keras.config.set_dtype_policy("float64")
    model = dense_bn_model()
    gradients = random_gradients(model, np.random.default_rng(2))
    start = [v.numpy().ravel().tolist() for v in model.trainable_variables]
    got = run_optimizer(
        LARS(0.125, momentum=0.9, weight_decay=0.05, eta=None, exclude=[]), model, gradients
    )
    flat = [[g.ravel().tolist() for g in step] for step in gradients]
    expected = sgd_reference(start, flat, 0.125, 0.9, 0.05)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g.ravel(), e, rtol=1e-12, atol=1e-14)


def test_no_adaptation_no_decay_is_keras_sgd():
    weights = dense_bn_model().get_weights()
    gradients = random_gradients(dense_bn_model(), np.random.default_rng(3))
    results = []
    for optimizer in (
        LARS(0.1, momentum=0.9, eta=None, exclude=[]),
        keras.optimizers.SGD(0.1, momentum=0.9),
    ):
        model = dense_bn_model()
        model.set_weights(weights)
        variables = model.trainable_variables
        for step_gradients in gradients:
            optimizer.apply([tf.constant(g, dtype="float32") for g in step_gradients], variables)
        results.append([v.numpy() for v in variables])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_default_rule_excludes_biases_and_norm_parameters():
    model = dense_bn_model()
    # Paths start with the model's name: "sequential/dense/kernel".
    flags = {v.path.split("/", 1)[1]: is_bias_or_norm(v) for v in model.trainable_variables}
    assert flags == {
        "dense/kernel": False,
        "dense/bias": True,
        "sync_batch_normalization/gamma": True,
        "sync_batch_normalization/beta": True,
        "dense_1/kernel": False,
        "dense_1/bias": True,
    }


def fit_weights(num_replicas: int, x, y, weights):
    strategy = mirrored_strategy(num_replicas) if num_replicas > 1 else tf.distribute.get_strategy()
    with strategy.scope():
        model = dense_bn_model()
        model.set_weights(weights)
        model.compile(optimizer=LARS(0.5, momentum=0.9, weight_decay=1e-3, eta=0.1), loss="mse")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(len(x) // STEPS)
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    return model.get_weights()


def test_one_device_equals_replicas():
    """Each replica holds different rows: norms and steps must be those of the global batch."""
    keras.config.set_dtype_policy("float64")
    rng = np.random.default_rng(4)
    x = rng.normal(size=(STEPS * 8, 5))
    y = rng.normal(size=(STEPS * 8, 2))
    weights = dense_bn_model().get_weights()
    one = fit_weights(1, x, y, weights)
    assert any(np.abs(a - b).max() > 1e-3 for a, b in zip(one, weights, strict=True))
    for num_replicas in (2, 4):
        many = fit_weights(num_replicas, x, y, weights)
        for a, b in zip(one, many, strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def compiled_model(weights):
    model = dense_bn_model()
    model.set_weights(weights)
    schedule = WarmupCosineDecay(0.5, total_steps=10, warmup_steps=2)
    model.compile(optimizer=LARS(schedule, weight_decay=1e-4, eta=0.05), loss="mse")
    return model


def test_saved_and_resumed_equals_uninterrupted(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.normal(size=(24, 5)).astype("float32")
    y = rng.normal(size=(24, 2)).astype("float32")
    weights = dense_bn_model().get_weights()
    straight = compiled_model(weights)
    straight.fit(x, y, batch_size=8, shuffle=False, verbose=0)

    first = compiled_model(weights)
    first.fit(x[:16], y[:16], batch_size=8, shuffle=False, verbose=0)
    first.save(tmp_path / "lars.keras")
    resumed = keras.saving.load_model(tmp_path / "lars.keras")
    assert isinstance(resumed.optimizer, LARS)
    assert int(resumed.optimizer.iterations) == 2
    resumed.fit(x[16:], y[16:], batch_size=8, shuffle=False, verbose=0)

    for a, b in zip(straight.get_weights(), resumed.get_weights(), strict=True):
        assert np.abs(a - b).max() == 0
    for a, b in zip(straight.optimizer.variables, resumed.optimizer.variables, strict=True):
        assert np.abs(a.numpy() - b.numpy()).max() == 0


def test_config_round_trip_and_unsaveable_predicate():
    optimizer = LARS(0.2, momentum=0.5, weight_decay=1e-5, eta=0.01, exclude=["bn", "bias"])
    config = optimizer.get_config()
    assert config["weight_decay"] == 1e-5
    assert config["exclude"] == ["bn", "bias"]
    rebuilt = LARS.from_config(config)
    assert rebuilt.get_config() == config
    assert rebuilt.weight_decay is None  # Keras' own decoupled decay stays off

    predicate = LARS(exclude=lambda v: "kernel" in v.path)
    model = dense_bn_model()
    predicate.build(model.trainable_variables)
    assert [v.path.endswith("kernel") for v in model.trainable_variables] == list(
        predicate._excluded
    )
    with pytest.raises(ValueError, match="cannot be saved"):
        predicate.get_config()


def test_mixed_precision_step_is_finite():
    keras.config.set_dtype_policy("mixed_float16")
    model = dense_bn_model()
    before = model.get_weights()
    model.compile(
        optimizer=keras.mixed_precision.LossScaleOptimizer(LARS(0.5, weight_decay=1e-4)),
        loss="mse",
    )
    rng = np.random.default_rng(6)
    model.fit(rng.normal(size=(8, 5)), rng.normal(size=(8, 2)), batch_size=8, verbose=0)
    after = model.get_weights()
    assert all(np.isfinite(w).all() for w in after)
    assert any(np.abs(a - b).max() > 0 for a, b in zip(after, before, strict=True))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"learning_rate": -0.1}, "learning_rate"),
        ({"momentum": -0.5}, "momentum"),
        ({"momentum": 1.5}, "momentum"),
        ({"eta": 0.0}, "eta"),
        ({"eta": -1.0}, "eta"),
        ({"weight_decay": -1e-4}, "weight_decay"),
        ({"weight_decay": float("nan")}, "weight_decay"),
        ({"exclude": "bias"}, "exclude"),
        ({"exclude": 3}, "exclude"),
        ({"exclude": ["bias", 1]}, "exclude"),
    ],
)
def test_bad_arguments_raise_before_any_work(monkeypatch, kwargs, message):
    built = []
    monkeypatch.setattr(
        keras.optimizers.Optimizer, "__init__", lambda self, *a, **k: built.append(self)
    )
    with pytest.raises(ValueError, match=message):
        LARS(**kwargs)
    assert built == []
