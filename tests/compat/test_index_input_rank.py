"""The index API takes the batches Keras' `fit` takes: a missing (or extra) trailing 1 axis.

0.17's MNIST notebook trains and indexes `(n, 28, 28)` arrays on a model
whose input is `(28, 28, 1)`. Each call of the index API gives the same
result for `(n, 6, 6)` as for `(n, 6, 6, 1)`; shapes Keras refuses are
refused too.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.losses import MultiSimilarityLoss
from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.retrieval_metrics import RecallAtK


def _model():
    keras.utils.set_random_seed(3)
    inputs = keras.Input((6, 6, 1))
    outputs = keras.layers.Dense(4)(keras.layers.Flatten()(inputs))
    model = SimilarityModel(inputs, outputs)
    model.compile("sgd", loss=MultiSimilarityLoss(), distance="cosine")
    return model


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(24, 6, 6, 1)).astype(np.float32)
    y = np.repeat(np.arange(4), 6)
    return x, y


def _run_every_call(model, x, y):
    """The index API's calls on `x` (whatever its rank), with their results."""
    model.reset_index()
    model.index(x[:16], y[:16], verbose=0)
    model.index_single(x[16], int(y[16]), verbose=0)
    results = {
        "lookup": model.lookup(x[17:], k=3, verbose=0),
        "single_lookup": model.single_lookup(x[18], k=2),
        "evaluate_retrieval": model.evaluate_retrieval(x[17:], y[17:], [RecallAtK(k=1)], 0),
        "calibrate": model.calibrate(x[17:], y[17:], verbose=0).cutpoints,
        "match": model.match(x[17:]),
        "evaluate_classification": model.evaluate_classification(x[17:], y[17:], verbose=0),
    }
    return results


@pytest.mark.parametrize("form", ["missing trailing 1", "extra trailing 1"])
def test_every_index_call_gives_the_same_result_as_with_the_model_input_shape(data, form):
    x, y = data
    model = _model()
    expected = _run_every_call(model, x, y)
    other = x[..., 0] if form == "missing trailing 1" else x[..., np.newaxis]

    results = _run_every_call(model, other, y)

    for call, value in expected.items():
        assert results[call] == value, call


def test_mnist_shaped_arrays_index_as_in_the_017_notebook():
    keras.utils.set_random_seed(1)
    inputs = keras.Input((28, 28, 1))
    model = SimilarityModel(inputs, keras.layers.Dense(8)(keras.layers.Flatten()(inputs)))
    model.compile("adam", loss=MultiSimilarityLoss())
    x = np.random.default_rng(0).random((12, 28, 28)).astype(np.float32)
    y = np.repeat(np.arange(3), 4)
    model.fit(x, y, epochs=1, verbose=0)

    model.index(x, y, data=x, verbose=0)

    nearest = model.lookup(x[:2], k=1, verbose=0)
    assert [n[0].label for n in nearest] == [0, 0]
    assert nearest[0][0].distance == pytest.approx(0.0, abs=1e-5)


ACCEPTED = [(5, 6, 6), (5, 6, 6, 1), (5, 6, 6, 1, 1)]
REFUSED = [(5, 6, 6, 2), (5, 36), (5, 6, 1), (5, 3, 12)]


@pytest.mark.parametrize("shape", ACCEPTED + REFUSED)
def test_the_index_accepts_exactly_what_keras_predict_accepts(shape):
    x = np.zeros(shape, np.float32)
    # A model of its own: a predict function traced on two ranks loses the input rank.
    try:
        _model().predict(x, verbose=0)
        keras_accepts = True
    except ValueError:
        keras_accepts = False
    model = _model()

    assert keras_accepts == (shape in ACCEPTED)
    if keras_accepts:
        model.index(x, verbose=0)
        assert model.index_size() == shape[0]
    else:
        with pytest.raises(ValueError, match="Expected a batch of examples of shape"):
            model.index(x, verbose=0)
        assert model.index_size() == 0
