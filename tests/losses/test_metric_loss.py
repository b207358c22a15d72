"""What every metric loss shares: input checks, the empty case, mixed precision, configs."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import losses as tfsim_losses
from tensorflow_similarity.losses import (
    XBM,
    ArcFaceLoss,
    CircleLoss,
    MetricLoss,
    MultiSimilarityLoss,
    PNLoss,
    SoftNearestNeighborLoss,
    SupConLoss,
    TripletLoss,
)
from tests.losses.metric_fixtures import LABELS, embeddings

LOSSES = {
    "triplet": lambda: TripletLoss(),
    "triplet_margin": lambda: TripletLoss(distance="l2", margin=0.5),
    "pn": lambda: PNLoss(),
    "circle": lambda: CircleLoss(),
    "multisim": lambda: MultiSimilarityLoss(),
    "softnn": lambda: SoftNearestNeighborLoss(),
    "supcon": lambda: SupConLoss(),
}

NON_DEFAULT = {
    "triplet": lambda: TripletLoss("l1", "easy", "hard", 0.2, name="t", reduction="sum"),
    "pn": lambda: PNLoss("sql2", "easy", "easy", None, name="p", dtype="float64"),
    "circle": lambda: CircleLoss("l2", gamma=10.0, margin=0.3, name="c", reduction="none"),
    "multisim": lambda: MultiSimilarityLoss("cosine", 1.0, 20.0, 0.2, 0.4, 0.9, name="m"),
    "softnn": lambda: SoftNearestNeighborLoss("cosine", temperature=0.3, name="s"),
    "supcon": lambda: SupConLoss(temperature=0.2, name="sc", reduction="sum"),
}


@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_a_batch_without_positives_gives_zero_and_finite_gradients(loss_name):
    x = tf.constant(embeddings(seed=0)[:4], tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = LOSSES[loss_name]()(np.arange(4), x)
    grad = tape.gradient(value, x)

    assert value.numpy() == 0.0
    assert grad is None or np.all(grad.numpy() == 0.0)


@pytest.mark.parametrize("loss_name", sorted(LOSSES))
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_embeddings_give_finite_float32_losses(loss_name, policy):
    keras.config.set_dtype_policy(policy)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    x = embeddings(seed=1).astype("float32")
    with tf.GradientTape() as tape:
        out = model(x)
        value = LOSSES[loss_name]()(LABELS, out)
    grads = tape.gradient(value, model.trainable_variables)

    assert out.dtype != tf.float32 and value.dtype == tf.float32
    assert np.isfinite(value.numpy()) and value.numpy() > 0
    assert all(np.all(np.isfinite(g.numpy())) for g in grads)


def test_triplet_with_l2_on_identical_embeddings_has_finite_gradients():
    x = tf.constant(np.repeat(embeddings(seed=2)[:2], 3, axis=0), tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = TripletLoss(distance="l2")(np.array([0, 0, 0, 1, 1, 1]), x)
    grad = tape.gradient(value, x)

    assert np.isfinite(value.numpy()) and np.all(np.isfinite(tf.cast(grad, tf.float32).numpy()))


@pytest.mark.parametrize(
    ("labels", "x", "match"),
    [
        (np.zeros((4, 2), "int32"), np.ones((4, 3)), r"labels of shape \[batch\] or \[batch, 1\]"),
        (np.zeros(3, "int32"), np.ones((4, 3)), "3 labels for 4 embeddings"),
        (np.zeros(4, "float32"), np.ones((4, 3)), "integer class labels"),
        (np.zeros(4, "int32"), np.ones((4, 3, 2)), r"embeddings of shape \[batch, features\]"),
        (np.zeros(4, "int32"), np.ones(4), r"embeddings of shape \[batch, features\]"),
        (None, np.ones((4, 3)), "needs the class labels"),
    ],
)
def test_rejects_bad_inputs_before_any_work(labels, x, match, monkeypatch):
    loss = TripletLoss()

    def fail(*args):
        raise AssertionError("the loss started computing")

    monkeypatch.setattr(loss, "call", fail)
    with pytest.raises(ValueError, match=match):
        loss(labels, x)


def test_checks_unknown_lengths_at_run_time_and_accepts_column_labels():
    loss = TripletLoss()
    compute = tf.function(
        loss,
        input_signature=[tf.TensorSpec((None, 1), tf.int64), tf.TensorSpec((None, 4), tf.float32)],
    )
    x = embeddings(seed=3).astype("float32")

    np.testing.assert_allclose(
        compute(LABELS[:, None], x).numpy(), loss(LABELS, x).numpy(), rtol=1e-6
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="one label per embedding"):
        compute(LABELS[:5, None], x)


def test_rejects_sample_weight():
    with pytest.raises(ValueError, match="does not accept sample_weight"):
        TripletLoss()(LABELS, embeddings(), sample_weight=np.ones(len(LABELS)))


def test_reductions_on_one_device():
    x = embeddings(seed=4)
    terms = TripletLoss(reduction="none", dtype="float64")(LABELS, x).numpy()

    assert terms.shape == (len(LABELS),)
    np.testing.assert_allclose(TripletLoss()(LABELS, x).numpy(), terms.mean(), rtol=1e-12)
    np.testing.assert_allclose(
        TripletLoss(reduction="sum")(LABELS, x).numpy(), terms.sum(), rtol=1e-12
    )


@pytest.mark.parametrize("loss_name", sorted(NON_DEFAULT))
def test_config_round_trip(loss_name):
    loss = NON_DEFAULT[loss_name]()
    x = embeddings(seed=5)

    serialized = keras.saving.serialize_keras_object(loss)
    restored = keras.saving.deserialize_keras_object(serialized)

    assert serialized["registered_name"] == f"Similarity>{type(loss).__name__}"
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
    np.testing.assert_allclose(restored(LABELS, x).numpy(), loss(LABELS, x).numpy(), rtol=1e-12)


@pytest.mark.parametrize("loss_name", sorted(NON_DEFAULT))
def test_compiled_loss_survives_keras_file(loss_name, tmp_path):
    loss = NON_DEFAULT[loss_name]()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss=loss)
    model.save(tmp_path / "model.keras")

    loaded = keras.saving.load_model(tmp_path / "model.keras")

    assert type(loaded.loss) is type(loss)
    assert loaded.loss.get_config() == loss.get_config()


def _metric_loss_classes():
    return sorted(
        (
            cls
            for cls in (getattr(tfsim_losses, name) for name in tfsim_losses.__all__)
            if isinstance(cls, type)
            and issubclass(cls, MetricLoss)
            and cls not in (MetricLoss, tfsim_losses.ProxyLoss)  # Bases, not losses.
        ),
        key=lambda cls: cls.__name__,
    )


# One instance of every metric loss, with its defaults; a loss added to the package
# without an entry here fails `test_every_metric_loss_is_probed`.
EVERY_METRIC_LOSS = {
    "ArcFaceLoss": lambda: ArcFaceLoss(),
    "CircleLoss": lambda: CircleLoss(),
    "MultiSimilarityLoss": lambda: MultiSimilarityLoss(),
    "PNLoss": lambda: PNLoss(),
    "ProxyAnchorLoss": lambda: tfsim_losses.ProxyAnchorLoss(num_classes=4, embedding_size=5),
    "ProxyNCALoss": lambda: tfsim_losses.ProxyNCALoss(num_classes=4, embedding_size=5),
    "SoftNearestNeighborLoss": lambda: SoftNearestNeighborLoss(),
    "SupConLoss": lambda: SupConLoss(),
    "TripletLoss": lambda: TripletLoss(),
    "XBM": lambda: XBM(MultiSimilarityLoss(), memory_size=16),
}
DISTANCE_LOSSES = {
    "CircleLoss": CircleLoss,
    "MultiSimilarityLoss": MultiSimilarityLoss,
    "PNLoss": PNLoss,
    "SoftNearestNeighborLoss": SoftNearestNeighborLoss,
    "TripletLoss": TripletLoss,
}


def _one_bad_row(row, bad, width=5):
    """8 unit rows, 4 classes x 2 (as `[0, 0, 1, 1, ...]`), row `row` set to `bad`."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(8, width))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[row] = bad
    return np.repeat(np.arange(4), 2), x.astype("float32")


def test_every_metric_loss_is_probed():
    assert sorted(EVERY_METRIC_LOSS) == [cls.__name__ for cls in _metric_loss_classes()]


@pytest.mark.parametrize("loss_name", sorted(EVERY_METRIC_LOSS))
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("row", [0, 5])
def test_one_non_finite_embedding_gives_a_nan_loss(loss_name, bad, row):
    # ArcFace takes [n, num_classes] cosines: 4 classes, so a row of width 4.
    labels, x = _one_bad_row(row, bad, width=4 if loss_name == "ArcFaceLoss" else 5)

    value = EVERY_METRIC_LOSS[loss_name]()(labels, x).numpy()

    assert np.isnan(value), f"{loss_name} returned {value} for a batch with a {bad} row"


@pytest.mark.parametrize("loss_name", sorted(DISTANCE_LOSSES))
@pytest.mark.parametrize(
    "distance",
    [
        "cosine",
        "sql2",
        "manhattan",
        "inner_product",
        "snr",
        "l2",
    ],
)
def test_one_nan_embedding_gives_a_nan_loss_for_every_distance(loss_name, distance):
    labels, x = _one_bad_row(3, np.nan)
    loss = DISTANCE_LOSSES[loss_name](distance=distance)

    assert np.isnan(loss(labels, x).numpy())
    assert np.isnan(XBM(loss, memory_size=16)(labels, x).numpy())
