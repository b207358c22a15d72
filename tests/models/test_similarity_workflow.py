"""0.17's index workflow end to end: a ResNet18Sim with sync BN on 2 replicas, on the digits."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.architectures import ResNet18Sim
from tensorflow_similarity.datasets import load_data
from tensorflow_similarity.layers import SyncBatchNormalization
from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.retrieval_metrics import RecallAtK
from tensorflow_similarity.testing import mirrored_strategy
from tensorflow_similarity.types import CalibrationResults, Lookup

EMBEDDING = 16


def _loop_recall_at_1(queries, labels, keys, key_labels):
    hits = []
    for q, label in zip(queries.astype(np.float64), labels, strict=True):
        distances = [1 - q @ k / np.linalg.norm(q) / np.linalg.norm(k) for k in keys]
        hits.append(key_labels[int(np.argmin(distances))] == label)
    return float(np.mean(hits))


@pytest.mark.slow
def test_index_workflow_on_digits_with_resnet18_sync_bn_on_two_replicas(tmp_path):
    data = load_data("digits", 8)
    # A subset keeps the test within a minute on two cores.
    x_train, y_train = data.x_train[:400], data.y_train[:400]
    half = len(data.x_test) // 2
    x_cal, y_cal = data.x_test[:half], data.y_test[:half]
    x_query, y_query = data.x_test[half:], data.y_test[half:]
    # A per-example loss standing in for a metric loss: pull each embedding to a fixed
    # unit vector of its class.
    rng = np.random.default_rng(0)
    centroids = rng.normal(size=(10, EMBEDDING)).astype(np.float32)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)

    keras.utils.set_random_seed(0)
    strategy = mirrored_strategy(2)
    with strategy.scope():
        model = ResNet18Sim((8, 8, 3), embedding_size=EMBEDDING, sync_bn=True)
        assert type(model) is SimilarityModel
        assert any(isinstance(layer, SyncBatchNormalization) for layer in _layers(model))
        model.compile(keras.optimizers.Adam(1e-3), keras.losses.MeanSquaredError())
    history = model.fit(x_train, centroids[y_train], epochs=3, batch_size=100, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]

    with strategy.scope():
        model.index(x_train, y_train, data=x_train, verbose=0)
    assert model.index_size() == len(x_train)
    lookups = model.lookup(x_query, k=5, verbose=0)
    assert all(isinstance(n, Lookup) for row in lookups for n in row)
    for row in lookups:
        distances = [n.distance for n in row]
        assert distances == sorted(distances) and [n.rank for n in row] == [1, 2, 3, 4, 5]
    first = lookups[0][0]
    assert first.data.shape == (8, 8, 3) and first.label in set(y_train.tolist())

    calibration = model.calibrate(x_cal, y_cal, thresholds_targets={"0.8": 0.8}, verbose=0)
    assert isinstance(calibration, CalibrationResults)
    optimal = calibration.cutpoints["optimal"]
    assert {"distance", "value", "precision", "recall", "f1"} <= set(optimal)

    matches = np.asarray(model.match(x_query))
    nearest = np.asarray([row[0].label for row in lookups])
    near = np.asarray([row[0].distance for row in lookups]) <= optimal["distance"]
    np.testing.assert_array_equal(matches, np.where(near, nearest, -1))

    recall = model.evaluate_retrieval(x_query, y_query, [RecallAtK(k=1)], verbose=0)["recall@1"]
    keys = model.predict(x_train, batch_size=256, verbose=0)
    queries = model.predict(x_query, batch_size=256, verbose=0)
    reference = _loop_recall_at_1(queries, y_query, keys, y_train)
    assert recall == pytest.approx(reference, abs=1 / len(y_query))
    # Ten classes: chance is 0.1.
    assert recall > 0.5, recall

    model.save_index(tmp_path / "index_dir")
    model.reset_index()
    assert model.index_size() == 0
    model.load_index(tmp_path / "index_dir")
    assert model.lookup(x_query, k=5, verbose=0) == lookups
    assert model.match(x_query) == matches.tolist()

    # A .keras round trip: the class and its sync BN come back, and the index beside it.
    model.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    assert type(reloaded) is SimilarityModel
    assert any(isinstance(layer, SyncBatchNormalization) for layer in _layers(reloaded))
    reloaded.load_index(tmp_path / "model.keras")
    again = reloaded.lookup(x_query, k=5, verbose=0)
    assert [[n.label for n in row] for row in again] == [[n.label for n in row] for row in lookups]
    np.testing.assert_allclose(
        [[n.distance for n in row] for row in again],
        [[n.distance for n in row] for row in lookups],
        atol=1e-5,
    )


def _layers(model):
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _layers(layer)
