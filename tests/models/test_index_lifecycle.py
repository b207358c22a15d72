"""The model's lifecycle verbs: remove_from_index, upsert_index, compact_index."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.models.index_fingerprint import StaleIndexError


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    model = SimilarityModel(inputs, keras.layers.Dense(4)(inputs), name="sim")
    model.compile("sgd", "mse", distance="euclidean")
    return model


def test_remove_upsert_and_compact_keep_ids_through_save_and_load(tmp_path):
    model = _model()
    x = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)
    model.index(x, np.arange(8) % 2, verbose=0)
    model.remove_from_index([3])
    assert all(n.id != 3 for n in model.single_lookup(x[3], k=7))
    model.upsert_index([5, 20], x[[0, 3]], y=[1, 0])
    nearest = model.single_lookup(x[3], k=1)[0]
    assert (nearest.id, nearest.label, nearest.distance) == (20, 0, 0.0)
    model.compact_index()
    model.save_index(tmp_path / "m.keras")
    other = _model()
    other.load_index(tmp_path / "m.keras")
    assert other._index.ids().tolist() == [0, 1, 2, 4, 6, 7, 5, 20]
    assert other.single_lookup(x[3], k=1)[0].id == 20
    other.index(x[:1], [0], verbose=0)
    assert other._index.ids().tolist()[-1] == 21  # the counter passed the upserted id


def test_upsert_index_checks_the_ids_and_the_weights():
    model = _model()
    x = np.ones((2, 3), np.float32)
    model.index(x, [0, 1], verbose=0)
    with pytest.raises(ValueError, match="ids is required"):
        model.upsert_index(None, x)
    with pytest.raises(ValueError, match="1 items in ids for 2 examples"):
        model.upsert_index([0], x)
    model.layers[-1].kernel.assign(np.zeros((3, 4), np.float32))
    with pytest.raises(StaleIndexError):
        model.upsert_index([0, 1], x)
    assert model.index_size() == 2


def test_load_index_passes_search_options_to_the_saved_search(tmp_path):
    pytest.importorskip("faiss")
    from tensorflow_similarity.search import FaissOnDiskSearch

    model = _model()
    search = FaissOnDiskSearch("euclidean", 4, nlist=2, nprobe=2, train_size=4)
    model.create_index("euclidean", search=search)
    x = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)
    model.index(x, np.arange(8) % 2, verbose=0)
    model.save(tmp_path / "m.keras")
    other = _model()
    other.load_index(tmp_path / "m.keras", search_options={"directory": tmp_path / "work"})
    assert other._index.search.directory == tmp_path / "work"
    assert other.single_lookup(x[5], k=1)[0].id == 5
    other.index(x[:1], [0], verbose=0)
    assert (tmp_path / "work" / "faiss_ondisk.ids").stat().st_size == 8 * 9
    with pytest.raises(ValueError, match="cannot change 'nprobe'"):
        other.load_index(tmp_path / "m.keras", search_options={"nprobe": 1})
