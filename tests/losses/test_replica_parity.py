"""The global-batch contract, on every loss: one device against 2, 4 and 8 replicas.

Each replica holds a different, unequal part of the batch (an empty one at
8); in float64 the replicas' values add up to the one-device value and their
gradients are the one-device gradients to ~1e-12, for every reduction, with
each replica computing only its own rows.
"""

from __future__ import annotations

import inspect

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import losses
from tensorflow_similarity.collectives import gather_keys
from tensorflow_similarity.losses import (
    XBM,
    ArcFaceLoss,
    Barlow,
    BYOLLoss,
    CircleLoss,
    DINOLoss,
    GlobalBatchLoss,
    MetricLoss,
    MoCoV3Loss,
    MultiNegativesRankLoss,
    MultiSimilarityLoss,
    PNLoss,
    ProxyAnchorLoss,
    ProxyNCALoss,
    SimCLRLoss,
    SimSiamLoss,
    SoftNearestNeighborLoss,
    SupConLoss,
    TripletLoss,
    VicReg,
)
from tensorflow_similarity.testing import assert_replica_parity, replica_parity, uneven_sizes

F64 = {"dtype": "float64"}
BATCH, DIM, CLASSES = 24, 5, 4

_SEEDED = keras.initializers.RandomNormal(seed=7)
# Parameters keep every term active (no hinge at 0, no saturated softmax).
TWO_VIEW = {
    "simsiam": lambda **kw: SimSiamLoss(**F64, **kw),
    "simclr": lambda **kw: SimCLRLoss(temperature=0.5, **F64, **kw),
    "multinegrank": lambda **kw: MultiNegativesRankLoss(scale=2.0, **F64, **kw),
    "barlow": lambda **kw: Barlow(lambda_=0.05, **F64, **kw),
    "vicreg": lambda **kw: VicReg(gamma=4.0, **F64, **kw),
    "byol": lambda **kw: BYOLLoss(**F64, **kw),
    "mocov3": lambda **kw: MoCoV3Loss(temperature=0.5, **F64, **kw),
}
# [batch, crops, prototypes]: the teacher's 2 global crops, the student's 2 global and 2 local.
MULTI_CROP = {
    "dino": lambda **kw: DINOLoss(student_temperature=0.5, **F64, **kw),
}
TEACHER_CROPS, STUDENT_CROPS, PROTOTYPES = 2, 4, 6
METRIC = {
    "triplet": lambda **kw: TripletLoss(**F64, **kw),
    "triplet_hard_l2": lambda **kw: TripletLoss(
        distance="l2",
        positive_mining_strategy="hard",
        negative_mining_strategy="hard",
        margin=2.0,
        **F64,
        **kw,
    ),
    "pn": lambda **kw: PNLoss(**F64, **kw),
    "circle": lambda **kw: CircleLoss(gamma=4.0, **F64, **kw),
    "multisim": lambda **kw: MultiSimilarityLoss(beta=10.0, epsilon=0.5, **F64, **kw),
    "softnn": lambda **kw: SoftNearestNeighborLoss(**F64, **kw),
    "supcon": lambda **kw: SupConLoss(temperature=0.5, **F64, **kw),
    "xbm": lambda **kw: XBM(MultiSimilarityLoss(**F64), memory_size=64, **F64, **kw),
    "function": lambda **kw: MetricLoss(_spread, distance="sql2", **F64, **kw),
    "arcface": lambda **kw: ArcFaceLoss(scale=4.0, **F64, **kw),
    # One proxy more than the classes drawn: a proxy with no sample in the batch. A seeded
    # initializer gives every copy from the config the same proxies.
    "proxyanchor": lambda **kw: ProxyAnchorLoss(
        CLASSES + 1, DIM, alpha=4.0, proxy_initializer=_SEEDED, **F64, **kw
    ),
    "proxynca": lambda **kw: ProxyNCALoss(
        CLASSES + 1, DIM, temperature=0.5, proxy_initializer=_SEEDED, **F64, **kw
    ),
}
STATISTICS = {"barlow", "vicreg", "proxyanchor"}


@keras.saving.register_keras_serializable(package="SimilarityTests")
def _spread(query_labels, query_embeddings, key_labels, key_embeddings, distance):
    """A 0.17-style loss function: each query's mean distance to its class among the keys."""
    same = tf.cast(tf.equal(query_labels[:, None], key_labels[None, :]), key_embeddings.dtype)
    d = distance(query_embeddings, key_embeddings)
    return tf.reduce_sum(d * same, axis=1) / tf.reduce_sum(same, axis=1)


def _inputs(name: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    if name in TWO_VIEW:
        z1 = rng.normal(size=(BATCH, DIM))
        return z1, z1 + 0.5 * rng.normal(size=(BATCH, DIM))
    if name in MULTI_CROP:
        teacher = np.exp(rng.normal(size=(BATCH, TEACHER_CROPS, PROTOTYPES)))
        teacher /= teacher.sum(axis=-1, keepdims=True)
        return teacher, rng.normal(size=(BATCH, STUDENT_CROPS, PROTOTYPES))
    labels = rng.integers(0, CLASSES, size=BATCH)
    if name == "arcface":
        return labels, rng.uniform(-0.9, 0.9, size=(BATCH, CLASSES))
    return labels, rng.normal(size=(BATCH, DIM))


def _make(name: str, **kwargs):
    return {**TWO_VIEW, **MULTI_CROP, **METRIC}[name](**kwargs)


ALL = sorted({**TWO_VIEW, **MULTI_CROP, **METRIC})


@pytest.mark.parametrize("name", ALL)
def test_every_loss_is_exact_on_2_4_and_8_replicas(name):
    results = assert_replica_parity(_make(name), *_inputs(name), replicas=(2, 4, 8))

    assert [r.sizes for r in results] == [uneven_sizes(BATCH, k) for k in (2, 4, 8)]
    assert 0 in results[-1].sizes, "one replica of 8 holds no rows"
    assert results[0].scale > 1e-3, "degenerate case: value and gradients are ~0"


# The reductions are the base's, shared by every loss: one loss of each kind
# (terms against gathered keys, batch statistics, mined, with a memory, against
# gathered keys without gradient, on [batch, crops, prototypes] inputs).
@pytest.mark.parametrize("name", ["simclr", "barlow", "triplet", "xbm", "mocov3", "dino"])
def test_sum_and_none_keep_the_contract_on_replicas(name):
    reductions = ["sum"] if name in STATISTICS else ["sum", "none"]
    for reduction in reductions:
        assert_replica_parity(
            _make(name, reduction=reduction), *_inputs(name, seed=1), replicas=(3,)
        )


@pytest.mark.parametrize("name", ALL)
def test_sum_is_the_batch_size_times_the_mean(name):
    y_true, y_pred = _inputs(name, seed=2)
    mean = float(_make(name)(y_true, y_pred))
    total = float(_make(name, reduction="sum")(y_true, y_pred))

    np.testing.assert_allclose(total, BATCH * mean, rtol=1e-12)
    if name not in STATISTICS:
        terms = _make(name, reduction="none")(y_true, y_pred).numpy()
        assert terms.shape == (BATCH,)
        np.testing.assert_allclose(terms.mean(), mean, rtol=1e-12)
    else:
        with pytest.raises(ValueError, match="no per-sample terms"):
            _make(name, reduction="none")


def test_every_public_loss_follows_the_one_contract():
    classes = [
        value
        for value in vars(losses).values()
        if inspect.isclass(value) and issubclass(value, keras.losses.Loss)
    ]
    assert "GlobalBatchLoss" in losses.__all__
    assert {c.__name__ for c in classes} >= {
        "TripletLoss",
        "SimCLRLoss",
        "Barlow",
        "XBM",
        "BYOLLoss",
        "MoCoV3Loss",
        "DINOLoss",
    }
    for cls in classes:
        assert issubclass(cls, GlobalBatchLoss), cls.__name__


class _LocalOnly(GlobalBatchLoss):
    """Contrasts each replica's rows with its own rows only: wrong across replicas."""

    def call(self, y_true, y_pred):
        d = tf.reduce_sum((y_pred[:, None] - y_pred[None]) ** 2, axis=-1)
        return tf.reduce_mean(d, axis=1)


class _Gathered(_LocalOnly):
    """The same, against the keys gathered from every replica: right."""

    def call(self, y_true, y_pred):
        (keys,) = gather_keys(y_pred)
        d = tf.reduce_sum((y_pred[:, None] - keys[None]) ** 2, axis=-1)
        return tf.reduce_mean(d, axis=1)


def test_the_parity_helper_catches_a_loss_that_ignores_the_other_replicas():
    z1, z2 = _inputs("simclr")

    with pytest.raises(AssertionError, match="on 2 replicas holding \\[8, 16\\] rows"):
        assert_replica_parity(_LocalOnly(name="local", dtype="float64"), z1, z2, replicas=(2,))
    (wrong,) = replica_parity(_LocalOnly(name="local", dtype="float64"), z1, z2, replicas=(2,))
    assert wrong.value_error > 1e-3 and wrong.gradient_error > 1e-3
    assert_replica_parity(_Gathered(name="gathered", dtype="float64"), z1, z2, replicas=(2, 4))


def test_unknown_reductions_are_refused_by_name():
    for name in ALL:
        with pytest.raises(ValueError, match="reduction='max'"):
            _make(name, reduction="max")
