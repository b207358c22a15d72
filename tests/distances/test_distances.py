"""Every distance against a float64 NumPy loop, its names, config and gradients."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.distances import (
    DISTANCES,
    CosineDistance,
    Distance,
    EuclideanDistance,
    InnerProductSimilarity,
    ManhattanDistance,
    SNRDistance,
    SquaredEuclideanDistance,
    canonicalizer,
    distance_canonicalizer,
)


def _cosine(q, k):
    return 1.0 - q @ k / (np.linalg.norm(q) * np.linalg.norm(k))


REFERENCES = {
    CosineDistance: _cosine,
    EuclideanDistance: lambda q, k: np.sqrt(np.sum((q - k) ** 2)),
    SquaredEuclideanDistance: lambda q, k: np.sum((q - k) ** 2),
    ManhattanDistance: lambda q, k: np.sum(np.abs(q - k)),
    InnerProductSimilarity: lambda q, k: q @ k,
    SNRDistance: lambda q, k: np.var(k - q) / np.var(q),
}

NAMES = {
    "cosine": CosineDistance,
    "euclidean": EuclideanDistance,
    "l2": EuclideanDistance,
    "pythagorean": EuclideanDistance,
    "squared_euclidean": SquaredEuclideanDistance,
    "sql2": SquaredEuclideanDistance,
    "sqeuclidean": SquaredEuclideanDistance,
    "manhattan": ManhattanDistance,
    "l1": ManhattanDistance,
    "taxicab": ManhattanDistance,
    "inner_product": InnerProductSimilarity,
    "ip": InnerProductSimilarity,
    "snr": SNRDistance,
    "signal-to-noise-ratio": SNRDistance,
}


def _loop(reference, query, key):
    out = np.zeros((len(query), len(key)))
    for i in range(len(query)):
        for j in range(len(key)):
            out[i, j] = reference(query[i], key[j])
    return out


@pytest.mark.parametrize("cls", list(REFERENCES), ids=lambda c: c.__name__)
def test_pairwise_values_match_numpy_loops(cls):
    rng = np.random.default_rng(0)
    query, key = rng.normal(size=(5, 3)), rng.normal(size=(7, 3))

    value = cls()(query, key)

    assert value.shape == (5, 7) and value.dtype == tf.float64
    np.testing.assert_allclose(value.numpy(), _loop(REFERENCES[cls], query, key), atol=1e-12)


@pytest.mark.parametrize("cls", list(REFERENCES), ids=lambda c: c.__name__)
def test_float32_values_are_close_to_float64(cls):
    rng = np.random.default_rng(1)
    query, key = rng.normal(size=(4, 6)), rng.normal(size=(3, 6))

    value = cls()(query.astype("float32"), key.astype("float32"))

    assert value.dtype == tf.float32
    np.testing.assert_allclose(value.numpy(), _loop(REFERENCES[cls], query, key), atol=1e-4)


@pytest.mark.parametrize("cls", list(REFERENCES), ids=lambda c: c.__name__)
def test_gradients_are_finite_on_identical_rows(cls):
    rows = tf.constant(np.random.default_rng(2).normal(size=(4, 3)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(rows)
        value = tf.reduce_sum(cls()(rows, rows))
    grad = tape.gradient(value, rows)

    assert np.isfinite(value.numpy()) and np.all(np.isfinite(grad.numpy()))


def test_euclidean_is_zero_with_a_zero_gradient_on_identical_rows():
    rows = tf.constant([[1.0, 2.0], [1.0, 2.0], [4.0, 6.0]], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(rows)
        value = EuclideanDistance()(rows, rows)
        total = value[0, 1] + value[0, 2]
    grad = tape.gradient(total, rows).numpy()

    assert value.numpy()[0, 1] == 0.0 and value.numpy()[0, 0] == 0.0
    # Only the (0, 2) pair contributes: d/dq |q - k| = (q - k) / |q - k|.
    np.testing.assert_allclose(grad[0], [-0.6, -0.8], rtol=1e-12)
    np.testing.assert_allclose(grad[1], [0.0, 0.0])


def test_cosine_clips_rounding_below_zero():
    rows = np.random.default_rng(3).normal(size=(6, 5)).astype("float32")

    value = CosineDistance()(rows, rows).numpy()

    assert value.min() >= 0.0
    np.testing.assert_allclose(np.diag(value), 0.0, atol=1e-6)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_canonicalizer_resolves_every_name_and_alias(name):
    for spelling in (name, name.upper(), f"  {name} "):
        assert type(distance_canonicalizer(spelling)) is NAMES[name]


def test_canonicalizer_returns_instances_unchanged_and_lists_names_on_error():
    distance = ManhattanDistance(name="custom")
    assert distance_canonicalizer(distance) is distance
    assert type(distance_canonicalizer("squaredeuclideandistance")) is SquaredEuclideanDistance
    for bad in ("hamming", 3, None):
        with pytest.raises(ValueError, match=r"Unknown distance.*'cosine'.*'sql2'"):
            distance_canonicalizer(bad)


# 0.17.1's DISTANCES, printed in its virtualenv:
#   source /tmp/tfsim017/bin/activate && TF_USE_LEGACY_KERAS=1 python -c "
#   from tensorflow_similarity.distances import DISTANCES
#   print([(type(d).__name__, d.name, d.aliases) for d in DISTANCES])"
DISTANCES_017 = [
    ("InnerProductSimilarity", "inner_product", ["ip"]),
    ("EuclideanDistance", "euclidean", ["l2", "pythagorean"]),
    ("SquaredEuclideanDistance", "squared_euclidean", ["sql2", "sqeuclidean"]),
    ("ManhattanDistance", "manhattan", ["l1", "taxicab"]),
    ("CosineDistance", "cosine", []),
    ("SNRDistance", "snr", ["signal-to-noise-ratio"]),
]


def test_distances_registry_is_017s_and_what_the_canonicalizer_resolves():
    assert [(type(d).__name__, d.name, d.aliases) for d in DISTANCES] == DISTANCES_017
    assert DISTANCES is canonicalizer.DISTANCES
    for registered in DISTANCES:
        for name in (registered.name, *registered.aliases):
            resolved = distance_canonicalizer(name)
            assert type(resolved) is type(registered) and resolved is not registered
            resolved.aliases.append("changed")
    assert [(type(d).__name__, d.name, d.aliases) for d in DISTANCES] == DISTANCES_017
    assert {name for name in NAMES} == {name for d in DISTANCES for name in (d.name, *d.aliases)}


def test_a_distance_appended_to_the_registry_is_found_by_name():
    class Chebyshev(Distance):
        def call(self, query, key):
            return tf.reduce_max(tf.abs(query[:, None, :] - key[None, :, :]), axis=-1)

    DISTANCES.append(Chebyshev(name="chebyshev", aliases=["linf"]))
    try:
        resolved = distance_canonicalizer("LInf")
    finally:
        DISTANCES.pop()

    assert type(resolved) is Chebyshev and resolved.name == "chebyshev"
    np.testing.assert_array_equal(resolved([[0.0, 0.0]], [[3.0, -4.0]]).numpy(), [[4.0]])
    with pytest.raises(ValueError, match="Unknown distance"):
        distance_canonicalizer("linf")


@pytest.mark.parametrize("cls", list(REFERENCES), ids=lambda c: c.__name__)
def test_config_round_trip(cls):
    distance = cls(name="mine", aliases=["a"])

    serialized = keras.saving.serialize_keras_object(distance)
    restored = keras.saving.deserialize_keras_object(serialized)

    assert serialized["registered_name"] == f"Similarity>{cls.__name__}"
    assert type(restored) is cls and restored.get_config() == {"name": "mine", "aliases": ["a"]}
    assert isinstance(restored, Distance) and str(restored) == "mine"
    assert cls().get_config()["name"] == cls.default_name


def test_rejects_embeddings_that_are_not_2d():
    with pytest.raises(ValueError, match=r"\[batch, features\]"):
        EuclideanDistance()(np.ones(3), np.ones((2, 3)))
