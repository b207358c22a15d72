"""`chunk_size` goes from the model's evaluation verbs to its index's chunked evaluation."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.retrieval_metrics import RecallAtK


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    model = SimilarityModel(inputs, keras.layers.Dense(4)(inputs), name="sim")
    model.compile("sgd", "mse", distance="euclidean")
    return model


def _examples(count, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(count, 3)).astype(np.float32), np.arange(count) % 3


def test_the_evaluation_verbs_pass_chunk_size_to_the_index(model, monkeypatch):
    x, y = _examples(9)
    model.reset_index()
    model.index(x, y, verbose=0)
    queries, labels = _examples(5, seed=1)
    index = model._index
    seen = []
    for verb in ("evaluate_retrieval", "calibrate", "evaluate_classification"):
        original = getattr(index, verb)

        def spy(*args, _original=original, **kwargs):
            seen.append(kwargs.get("chunk_size"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(index, verb, spy)
    metrics = [RecallAtK(k=2)]
    whole = model.evaluate_retrieval(queries, labels, metrics, verbose=0)
    assert model.evaluate_retrieval(queries, labels, metrics, verbose=0, chunk_size=2) == whole
    calibration = model.calibrate(queries, labels, verbose=0)
    chunked = model.calibrate(queries, labels, verbose=0, chunk_size=2)
    assert chunked.cutpoints == calibration.cutpoints
    assert chunked.thresholds.keys() == calibration.thresholds.keys()
    for name, values in calibration.thresholds.items():
        np.testing.assert_array_equal(chunked.thresholds[name], values)
    classification = model.evaluate_classification(queries, labels, verbose=0)
    assert model.evaluate_classification(queries, labels, verbose=0, chunk_size=2) == classification
    assert seen == [8192, 2, 8192, 2, 8192, 2]
    for verb in ("evaluate_retrieval", "evaluate_classification"):
        arguments = (metrics,) if verb == "evaluate_retrieval" else ()
        with pytest.raises(ValueError, match="chunk_size"):
            getattr(model, verb)(queries, labels, *arguments, verbose=0, chunk_size=0)
    with pytest.raises(ValueError, match="chunk_size"):
        model.calibrate(queries, labels, verbose=0, chunk_size=0)
    assert len(seen) == 6
