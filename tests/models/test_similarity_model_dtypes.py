"""SimilarityModel.fit of every metric loss under float64 and the mixed precision policies."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.layers import CosineClassifier
from tensorflow_similarity.losses import (
    XBM,
    ArcFaceLoss,
    CircleLoss,
    MultiSimilarityLoss,
    PNLoss,
    SoftNearestNeighborLoss,
    SupConLoss,
    TripletLoss,
)
from tensorflow_similarity.models import SimilarityModel

FEATURES, EMBEDDING, CLASSES, BATCH = 6, 4, 4, 16

# Every loss called as loss(labels, embeddings); ArcFace takes the cosines of a
# CosineClassifier head instead of embeddings.
LOSSES = {
    "arcface": ArcFaceLoss,
    "circle": CircleLoss,
    "multisim": MultiSimilarityLoss,
    "pn": PNLoss,
    "softnn": SoftNearestNeighborLoss,
    "supcon": SupConLoss,
    "triplet": TripletLoss,
    "xbm": lambda: XBM(MultiSimilarityLoss(), memory_size=2 * BATCH),
}
POLICIES = ("float64", "mixed_float16", "mixed_bfloat16")


@pytest.fixture
def policy(request):
    name = request.param
    floatx = keras.config.floatx()
    # A float64 run is float64 throughout, the losses' own dtype included.
    if name == "float64":
        keras.config.set_floatx("float64")
    keras.config.set_dtype_policy(name)
    yield name
    keras.config.set_floatx(floatx)


def _optimizer(policy: str) -> keras.optimizers.Optimizer:
    sgd = keras.optimizers.SGD(learning_rate=0.1)
    if policy != "mixed_float16":
        return sgd
    # Dynamic loss scaling skips the steps whose scaled float16 gradients
    # overflow (the first ones, for a large loss such as Circle's), by design;
    # a small initial scale lets the one step here update the weights.
    return keras.optimizers.LossScaleOptimizer(sgd, initial_scale=1.0)


@pytest.mark.parametrize("policy", POLICIES, indirect=True)
@pytest.mark.parametrize("loss_name", sorted(LOSSES))
def test_fit_trains_every_metric_loss_under_policy(loss_name, policy):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, FEATURES)).astype("float32")
    y = np.arange(BATCH) % CLASSES
    inputs = keras.Input((FEATURES,))
    outputs = keras.layers.Dense(EMBEDDING)(inputs)
    if loss_name == "arcface":
        outputs = CosineClassifier(CLASSES)(outputs)
    model = SimilarityModel(inputs, outputs)
    # Eagerly, the step runs the ops of the compiled one, without 24 traces.
    model.compile(_optimizer(policy), loss=LOSSES[loss_name](), run_eagerly=True)
    before = [np.asarray(w, dtype="float64") for w in model.trainable_weights]

    history = model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)

    assert np.isfinite(history.history["loss"][0])
    moved = [
        np.abs(np.asarray(w, dtype="float64") - b).max()
        for w, b in zip(model.trainable_weights, before, strict=True)
    ]
    assert max(moved) > 0.0
