"""The index knows which weights made it: a stale index warns, or is refused; empty batches."""

from __future__ import annotations

import json
import warnings

import keras
import numpy as np
import pytest

from tensorflow_similarity.indexer._metadata import METADATA_FILE, metadata_digest
from tensorflow_similarity.losses import MultiSimilarityLoss
from tensorflow_similarity.models import (
    SimilarityModel,
    create_contrastive_model,
)
from tensorflow_similarity.models.index import freshness, saving
from tensorflow_similarity.models.index_fingerprint import (
    StaleIndexError,
    StaleIndexWarning,
    weights_sample_key,
    weights_sha256,
)
from tensorflow_similarity.retrieval_metrics import RecallAtK

SHAPE = (6,)


def _data(n=24, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    return (rng.normal(size=(n, *SHAPE)) + y[:, None]).astype(np.float32), y


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(SHAPE)
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    model = SimilarityModel(inputs, keras.layers.Dense(4)(hidden), name="sim")
    model.compile(keras.optimizers.SGD(0.5), loss=MultiSimilarityLoss(), distance="l2")
    return model


def _train(model, x, y):
    model.fit(x, y, batch_size=12, epochs=1, verbose=0)


def _fake_export(monkeypatch):
    """Replaces the SavedModel writer: the calls `export_serving` makes to it."""
    calls = []
    monkeypatch.setattr(saving, "export_model", lambda *args, **kw: calls.append(args))
    return calls


def test_training_after_indexing_warns_once_per_change_and_export_refuses(monkeypatch):
    model = _model()
    x, y = _data()
    model.index(x, y, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.lookup(x[:2], k=1, verbose=0)
    _train(model, x, y)
    with pytest.warns(StaleIndexWarning, match="reset_index\\(\\) then model.index"):
        model.lookup(x[:2], k=1, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same change warns once
        model.single_lookup(x[0], k=1)
        model.evaluate_retrieval(x, y, retrieval_metrics=[RecallAtK(k=1)], verbose=0)
    model.set_weights([w * 0.5 for w in model.get_weights()])  # another change warns again
    with pytest.warns(StaleIndexWarning):
        model.calibrate(x, y, verbose=0)

    exported = _fake_export(monkeypatch)
    with pytest.raises(StaleIndexError, match="allow_stale_index=True"):
        model.export_serving("unused", verbose=0)
    assert exported == []
    with pytest.warns(StaleIndexWarning, match="allow_stale_index=True"):
        model.export_serving("unused", verbose=0, allow_stale_index=True)
    model.export_serving("unused", include_index=False, verbose=0)  # no index, nothing stale
    assert len(exported) == 2

    model.reset_index()
    model.index(x, y, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.lookup(x[:2], k=1, verbose=0)
        model.export_serving("unused", verbose=0)


def test_the_recorded_fingerprint_is_the_sha256_of_the_weights_at_indexing():
    model = _model()
    x, y = _data()
    before = weights_sha256(model.get_weights())
    model.index(x, y, verbose=0)
    model.set_weights([w + 0.1 for w in model.get_weights()])
    assert model._index.embedding_fingerprint == before != weights_sha256(model.get_weights())


def test_adding_embeddings_of_other_weights_to_an_index_is_refused():
    model = _model()
    x, y = _data()
    model.index(x[:12], y[:12], verbose=0)
    model.set_weights([w + 0.1 for w in model.get_weights()])
    with pytest.raises(StaleIndexError, match="Nothing was added"):
        model.index(x[12:], y[12:], verbose=0)
    with pytest.raises(StaleIndexError):
        model.index_single(x[12], y[12], verbose=0)
    assert model.index_size() == 12


def test_a_model_loaded_with_its_index_is_fresh_until_it_trains(tmp_path, monkeypatch):
    model = _model()
    x, y = _data()
    model.index(x, y, verbose=0)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    loaded.load_index(tmp_path / "model.keras")
    exported = _fake_export(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded.lookup(x[:2], k=1, verbose=0)
        loaded.export_serving("unused", verbose=0)
    assert len(exported) == 1
    _train(loaded, x, y)
    with pytest.warns(StaleIndexWarning):
        loaded.lookup(x[:2], k=1, verbose=0)
    with pytest.raises(StaleIndexError):
        loaded.export_serving("unused", verbose=0)


def test_an_index_saved_without_a_fingerprint_loads_with_a_warning_and_is_unchecked(tmp_path):
    model = _model()
    x, y = _data()
    model.index(x, y, verbose=0)
    model.save_index(tmp_path)
    file = tmp_path / "index" / METADATA_FILE
    metadata = json.loads(file.read_text())
    del metadata["embedding_fingerprint"]  # as saved before fingerprints were recorded
    metadata["metadata_sha256"] = metadata_digest(metadata)
    file.write_text(json.dumps(metadata))
    with pytest.warns(UserWarning, match="records no fingerprint"):
        model.load_index(tmp_path)
    assert model._index.embedding_fingerprint is None
    model.set_weights([w + 0.1 for w in model.get_weights()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.lookup(x[:2], k=1, verbose=0)
        model.index(x[:3], y[:3], verbose=0)  # unknown stays unknown
    assert model._index.embedding_fingerprint is None


def test_a_contrastive_model_fingerprints_its_backbone_only():
    keras.utils.set_random_seed(0)
    inputs = keras.Input(SHAPE)
    backbone = keras.Model(inputs, keras.layers.Dense(4)(inputs))
    model = create_contrastive_model(backbone, "simclr")
    model.create_index(distance="l2")
    x, y = _data()
    model.index(x, y, verbose=0)
    model.projector.set_weights([w + 1.0 for w in model.projector.get_weights()])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.lookup(x[:2], k=1, verbose=0)
    # set_weights moves no optimizer step: the cached fingerprint sees the weights change.
    backbone.set_weights([w + 1.0 for w in backbone.get_weights()])
    with pytest.warns(StaleIndexWarning):
        model.lookup(x[:2], k=1, verbose=0)


def test_an_empty_batch_has_no_lookups_and_no_metrics():
    model = _model()
    x, y = _data()
    model.index(x[:0], y[:0], verbose=0)
    assert model.index_size() == 0
    model.index(x, y, verbose=0)
    assert model.lookup(x[:0], k=2, verbose=0) == []
    model.calibrate(x, y, verbose=0)
    assert model.match(x[:0]) == []
    for verb, call in (
        ("evaluate_retrieval", lambda: model.evaluate_retrieval(x[:0], y[:0], [RecallAtK(k=1)])),
        ("evaluate_classification", lambda: model.evaluate_classification(x[:0], y[:0])),
        ("calibrate", lambda: model.calibrate(x[:0], y[:0])),
    ):
        with pytest.raises(ValueError, match=f"{verb} needs at least one query example"):
            call()


def test_lookups_reuse_the_fingerprint_until_the_sample_key_changes(monkeypatch):
    model = _model()
    x, y = _data()
    model.index(x, y, verbose=0)
    hashed = []
    original = freshness.weights_sha256
    monkeypatch.setattr(freshness, "weights_sha256", lambda v: hashed.append(1) or original(v))
    model.lookup(x[:2], k=1, verbose=0)
    model.single_lookup(x[0], k=1)
    assert hashed == []
    model.optimizer.iterations.assign_add(1)  # a step that moved no sampled value
    model.lookup(x[:2], k=1, verbose=0)
    assert hashed == [1]


def test_the_sample_key_sees_a_strided_value_and_the_optimizer_step():
    variable = keras.Variable(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    optimizer = keras.optimizers.SGD()
    key = weights_sample_key([variable], optimizer)
    assert weights_sample_key([variable], optimizer) == key
    variable.assign(variable.numpy() + np.eye(1, 24).reshape(2, 3, 4).astype(np.float32))
    moved = weights_sample_key([variable], optimizer)
    assert moved != key
    optimizer.iterations.assign_add(1)
    assert weights_sample_key([variable], optimizer) != moved
