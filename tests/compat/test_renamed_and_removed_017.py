"""0.17's keyword names, and the helpers and annotations 0.17 had, called the 0.17 way."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import tensorflow_similarity as tfsim
from tensorflow_similarity.augmenters import ContrastiveAugmenter, SimCLRAugmenter
from tensorflow_similarity.distances import EuclideanDistance, distance_canonicalizer
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.losses import (
    Barlow,
    MultiNegativesRankLoss,
    SimCLRLoss,
    SimSiamLoss,
    TripletLoss,
    VicReg,
)
from tensorflow_similarity.losses.simsiam import (
    angular_distance,
    cosine_distance,
    negative_cosine_sim,
)
from tensorflow_similarity.matchers import MatchMajorityVote, MatchNearest
from tensorflow_similarity.samplers import MultiShotMemorySampler
from tensorflow_similarity.testing import mirrored_strategy, run_on_replicas
from tensorflow_similarity.training_metrics import (
    DistanceGapMetric,
    batch_class_ratio,
    max_pos,
)
from tensorflow_similarity.types import Lookup
from tests.losses import numpy_reference

REPO = Path(__file__).resolve().parents[2]


def test_distance_keywords():
    query, key = np.array([[0.0, 0.0]]), np.array([[3.0, 4.0], [0.0, 1.0]])

    distance = distance_canonicalizer(user_distance="l2")
    value = distance(query_embeddings=query, key_embeddings=key)

    np.testing.assert_allclose(value.numpy(), [[5.0, 1.0]])
    assert isinstance(distance, EuclideanDistance)


def test_distance_metric_update_state_keywords():
    labels = np.array([0, 0, 1, 1])
    x = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0], [0.0, -1.0]])
    metric, gap = max_pos("l2"), DistanceGapMetric("l2")

    metric.update_state(labels=labels, embeddings=x)
    gap.update_state(labels=labels, embeddings=x)

    # Class 1's positives are 2 apart, class 0's 0.894.
    np.testing.assert_allclose(float(metric.result()), 2.0, rtol=1e-6)
    assert float(gap.result()) > 0.0


def test_augment_num_views_keyword():
    images = np.random.default_rng(0).integers(0, 256, (2, 8, 8, 3)).astype(np.float32)

    simclr = SimCLRAugmenter(8, 8, seed=1).augment(images, None, num_views=3, is_warmup=False)
    contrastive = ContrastiveAugmenter(lambda image: image * 2.0).augment(
        images, None, num_views=2, is_warmup=False
    )

    assert len(simclr) == 3 and simclr[0].shape == (2, 8, 8, 3)
    assert len(contrastive) == 2
    np.testing.assert_allclose(contrastive[1].numpy(), images * 2.0)


# 0.17's argument names of each loss's `call`.
CALL_ARGUMENTS_017 = {
    TripletLoss: ("y_true", "y_pred"),
    Barlow: ("za", "zb"),
    SimCLRLoss: ("za", "zb"),
    VicReg: ("za", "zb"),
    SimSiamLoss: ("projector", "predictor"),
    MultiNegativesRankLoss: ("query_emb", "key_emb"),
}


@pytest.mark.parametrize("cls", list(CALL_ARGUMENTS_017), ids=lambda c: c.__name__)
def test_loss_call_argument_names(cls):
    first, second = CALL_ARGUMENTS_017[cls]
    names = list(inspect.signature(cls.call).parameters)[1:]
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(6, 4)), rng.normal(size=(6, 4))
    loss = cls()
    if cls is TripletLoss:
        a = tf.constant([0, 0, 1, 1, 2, 2], tf.int64)
        b = tf.constant(b, tf.float32)

    value = loss.call(**{first: a, second: b})

    assert names == [first, second]
    assert np.all(np.isfinite(value.numpy()))


def test_barlow_and_vicreg_helpers():
    rng = np.random.default_rng(2)
    z1, z2 = rng.normal(size=(8, 3)), rng.normal(size=(8, 3))
    c = np.arange(9.0).reshape(3, 3)
    barlow, vicreg = Barlow(epsilon=0.0), VicReg()

    standard = barlow.standardize_columns(tf.constant(z1)).numpy()
    centred = vicreg.mean_center_columns(tf.constant(z1)).numpy()
    cov = vicreg.cov_loss_each(tf.constant(centred), 8).numpy()

    np.testing.assert_array_equal(barlow.off_diagonal(tf.constant(c)).numpy(), [1, 2, 3, 5, 6, 7])
    np.testing.assert_array_equal(vicreg.off_diagonal(tf.constant(c)).numpy(), [1, 2, 3, 5, 6, 7])
    np.testing.assert_allclose(standard, (z1 - z1.mean(0)) / z1.std(0), rtol=1e-10)
    np.testing.assert_allclose(centred, z1 - z1.mean(0), rtol=1e-12)
    full = centred.T @ centred / 7
    np.testing.assert_allclose(cov, (np.sum(full**2) - np.sum(np.diag(full) ** 2)) / 3)
    # The losses built on the helpers still are their references.
    np.testing.assert_allclose(
        float(Barlow(epsilon=0.0)(z1, z2)), numpy_reference.barlow(z1, z2, 5e-3, 0.0), rtol=1e-6
    )


def test_simclr_contrast_is_each_anchors_cross_entropy():
    rng = np.random.default_rng(3)
    h1, h2 = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    loss = SimCLRLoss(temperature=0.5)

    terms = loss.contrast(tf.constant(h1), tf.constant(h2)).numpy()

    for i in range(4):
        logits = [h1[i] @ h2[j] / 0.5 for j in range(4)]
        logits += [h1[i] @ h1[j] / 0.5 for j in range(4) if j != i]
        expected = -logits[i] + np.log(np.sum(np.exp(logits)))
        assert terms[i] == pytest.approx(expected, rel=1e-10)


def test_simsiam_projection_functions():
    sim = tf.constant([1.0, 0.0, -1.0])

    np.testing.assert_allclose(negative_cosine_sim(sim).numpy(), [-1.0, 0.0, 1.0])
    np.testing.assert_allclose(cosine_distance(sim).numpy(), [0.0, 1.0, 2.0])
    np.testing.assert_allclose(angular_distance(sim).numpy(), [0.0, 0.5, 1.0], atol=1e-7)


def test_batch_class_ratio_of_a_sampler():
    x, y = np.zeros((60, 2)), np.repeat(np.arange(15), 4)
    sampler = MultiShotMemorySampler(
        x, y, classes_per_batch=5, examples_per_class_per_batch=3, steps_per_epoch=20
    )

    assert batch_class_ratio(sampler) == 3.0
    assert batch_class_ratio([(None, [1, 1, 2, 3])], num_batches=5) == pytest.approx(4 / 3)
    dataset = tf.data.Dataset.from_tensors((np.zeros(4), np.array([0, 0, 1, 1]))).repeat()
    assert batch_class_ratio(dataset, num_batches=3) == 2.0
    with pytest.raises(ValueError, match="no batch"):
        batch_class_ratio([])


def test_017_annotations():
    from tensorflow_similarity.types import EqFunc, Symbol, Value

    def same(a: Value, b: Symbol) -> bool:
        return a is b

    check: EqFunc = same
    assert issubclass(Symbol, tf.Tensor) and issubclass(Value, tf.Tensor)
    assert check(1, 1)
    # 0.17 declared `Value.numpy`; eager tensors are what implement it.
    assert callable(Value.numpy) and tf.constant(2.0).numpy() == 2.0


def subclass_style_run() -> None:
    """0.17's subclass-style model: trains, indexes and looks up (run in a fresh process)."""

    class Embedder(tfsim.models.SimilarityModel):
        def __init__(self):
            super().__init__()
            self.flatten = keras.layers.Flatten()
            self.embed = keras.layers.Dense(6)

        def call(self, x):
            return self.embed(self.flatten(x))

    keras.utils.set_random_seed(4)
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(24, 3, 3)).astype(np.float32), np.repeat(np.arange(6), 4)
    model = Embedder()
    model.compile("adam", loss=tfsim.losses.MultiSimilarityLoss(), distance="l2")
    with pytest.raises(ValueError, match="not built yet"):
        model.index(x, y, verbose=0)

    model.fit(x, y, epochs=1, verbose=0)
    model.index(x, y, verbose=0)

    nearest = model.lookup(x[:4], k=1, verbose=0)
    assert [n[0].label for n in nearest] == list(y[:4])
    embeddings = model.predict(x, verbose=0)
    expected = np.linalg.norm(embeddings[4] - embeddings[5])
    found = [n.distance for n in model.single_lookup(x[4], k=24) if n.label == y[5]]
    # The l2 distance of compile(distance="l2"), with which the index was made once built.
    assert min(abs(d - expected) for d in found) < 1e-4


def test_subclass_style_similarity_model():
    # A fresh process: once a SimilarityModel is built with inputs and outputs, Keras has
    # made the class Functional, and the subclass style is refused (next test).
    code = (
        "from tests.compat.test_renamed_and_removed_017 import subclass_style_run; "
        "subclass_style_run(); print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )

    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_subclass_style_after_a_functional_model_is_refused_loudly():
    inputs = keras.Input((3,))
    tfsim.models.SimilarityModel(inputs, keras.layers.Dense(2)(inputs))

    class Embedder(tfsim.models.SimilarityModel):
        def __init__(self):
            super().__init__()

    with pytest.raises(TypeError, match="made the class Functional"):
        Embedder()


def test_simclr_cross_replica_concat():
    strategy = mirrored_strategy(2)
    rows = [np.full((2, 3), 1.0, np.float32), np.full((1, 3), 2.0, np.float32)]

    gathered = run_on_replicas(
        tf.function(lambda t: SimCLRLoss.cross_replica_concat(t, strategy)),
        np.concatenate(rows),
        [2, 1],
        strategy=strategy,
        traced=False,
    )

    for replica in gathered.results:
        np.testing.assert_array_equal(replica, np.concatenate(rows))
    np.testing.assert_array_equal(SimCLRLoss.cross_replica_concat(rows[0], None).numpy(), rows[0])


def test_lookups_holding_tensors_compare_element_wise():
    """0.17's tests compare Lookups whose embeddings are tensors."""
    first = Lookup(rank=0, distance=0.1, embedding=tf.ones((1, 4)))
    assert first == Lookup(rank=0, distance=0.1, embedding=tf.ones((1, 4)))
    assert first != Lookup(rank=0, distance=0.1, embedding=tf.zeros((1, 4)))
    assert first != Lookup(rank=0, distance=0.1, embedding=tf.ones((4,)))
    assert first == Lookup(rank=0, distance=0.1, embedding=np.ones((1, 4), np.float32))


@pytest.mark.parametrize("matcher", [MatchNearest(), MatchMajorityVote()])
def test_derive_match_takes_tensors_as_0_17_did(matcher):
    labels = [[10, 12, 10, 12, 10], [20, 13, 13, 20, 30]]
    distances = [[1.0, 1.1, 1.2, 1.3, 1.4], [2.0, 2.1, 2.2, 2.3, 2.4]]
    from_tensors = matcher.derive_match(tf.constant(labels), tf.constant(distances))
    from_arrays = matcher.derive_match(np.array(labels), np.array(distances, np.float32))
    for got, want in zip(from_tensors, from_arrays, strict=True):
        np.testing.assert_array_equal(got, want)
    # Nearest: the first column. Majority: 10 has 3 votes; 20 and 13 tie and 20 is nearer.
    np.testing.assert_array_equal(from_tensors[0], [[10], [20]])


def test_add_takes_a_label_in_a_one_element_tensor_as_0_17_did():
    index = Indexer(embedding_size=3, distance="l2")
    index.add(np.ones(3, np.float32), label=tf.constant([4]))
    index.add(np.zeros(3, np.float32), label=np.int64(7))
    assert [index.kv_store.get(i)[1] for i in range(2)] == [4, 7]
    assert all(type(index.kv_store.get(i)[1]) is int for i in range(2))
    with pytest.raises(ValueError, match="one integer"):
        index.add(np.ones(3, np.float32), label=tf.constant([1, 2]))
    assert index.size() == 2
