"""`SimilarityModel.index` of a stream: as one batch, all or nothing."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.models import SimilarityModel


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


def _lookups(model, x):
    return [[(n.id, n.label, n.data, n.distance) for n in row] for row in model.lookup(x, k=4)]


def test_a_dataset_or_a_generator_indexes_as_one_batch(model):
    x, y = _examples(11)
    data = np.arange(100, 111)
    model.reset_index()
    model.index(x, y, data=data, verbose=0)
    want = _lookups(model, x[:3])
    model.reset_index()
    model.index(tf.data.Dataset.from_tensor_slices((x, y, data)).batch(4), verbose=0)
    assert model.index_size() == 11 and _lookups(model, x[:3]) == want
    model.reset_index()
    batches = ((x[i : i + 3], y[i : i + 3], data[i : i + 3]) for i in range(0, 11, 3))
    model.index(batches, verbose=0)
    assert _lookups(model, x[:3]) == want
    assert model._index.embedding_fingerprint == model._embedding_fingerprint()


def test_a_batch_that_does_not_fit_the_model_undoes_the_stream(model):
    x, y = _examples(6)
    model.reset_index()
    model.index(x, y, verbose=0)
    before = _lookups(model, x[:2])

    def stream():
        yield x[:3], y[:3]
        yield np.ones((2, 5), np.float32), y[:2]

    with pytest.raises(ValueError, match=r"Batch 1 of the stream was refused: .*shape \(3,\)"):
        model.index(stream(), verbose=0)
    assert model.index_size() == 6 and _lookups(model, x[:2]) == before
    with pytest.raises(ValueError, match="y= and data= go inside the stream"):
        model.index(iter([x]), y=y, verbose=0)


def test_the_other_verbs_refuse_a_stream_saying_only_index_takes_one(model):
    x, y = _examples(4)
    model.reset_index()
    model.index(x, y, verbose=0)
    with pytest.raises(ValueError, match=r"got a stream \(generator\): only index\(\) takes"):
        model.lookup(row[None] for row in x)
    with pytest.raises(ValueError, match="only index"):
        model.evaluate_retrieval(tf.data.Dataset.from_tensor_slices(x).batch(2), y, [], verbose=0)
