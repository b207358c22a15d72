"""SimilarityModel: Keras training, the index API, saving, strategies and bad input."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tensorflow_similarity.architectures import BackboneSim
from tensorflow_similarity.losses import MultiSimilarityLoss, PNLoss, TripletLoss
from tensorflow_similarity.models import ContrastiveModel, SimilarityModel, create_contrastive_model
from tensorflow_similarity.retrieval_metrics import RecallAtK
from tensorflow_similarity.testing import mirrored_strategy

SHAPE = (6,)


def _data(seed=0, n=48, classes=3):
    centres = np.random.default_rng(7).normal(size=(classes, *SHAPE)) * 2
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    return (centres[y] + rng.normal(size=(n, *SHAPE))).astype(np.float32), y


def _model(outputs=1, seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(SHAPE)
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    embeddings = [keras.layers.Dense(3 + i, name=f"embedding{i}")(hidden) for i in range(outputs)]
    return SimilarityModel(inputs, embeddings if outputs > 1 else embeddings[0], name="sim")


def _loop_neighbours(queries, keys, k):
    """Float64 loops: the k nearest keys of each query by Euclidean distance."""
    rows = []
    for q in queries.astype(np.float64):
        distances = [np.sqrt(np.sum((q - key) ** 2)) for key in keys.astype(np.float64)]
        order = np.argsort(distances, kind="stable")[:k]
        rows.append((order, np.asarray(distances)[order]))
    return rows


def _check_lookups(lookups, queries, keys, labels, k):
    for lookup, (order, distances) in zip(lookups, _loop_neighbours(queries, keys, k), strict=True):
        assert [n.label for n in lookup] == labels[order].tolist()
        # Squared: float32 Euclidean search is sqrt(|q|^2 - 2q.k + |k|^2), ~1e-3 off near 0.
        np.testing.assert_allclose(
            np.square([n.distance for n in lookup]), np.square(distances), atol=1e-4
        )


def _same_neighbours(a, b):
    """Same neighbours by rank; distances equal up to float32 rounding of another batch."""
    assert len(a) == len(b)
    for row_a, row_b in zip(a, b, strict=True):
        assert [(n.rank, n.label) for n in row_a] == [(n.rank, n.label) for n in row_b]
        assert [np.asarray(n.data).tolist() for n in row_a] == [
            np.asarray(n.data).tolist() for n in row_b
        ]
        np.testing.assert_allclose(
            [n.distance for n in row_a], [n.distance for n in row_b], atol=1e-5
        )


def test_is_a_registered_functional_model_that_clones_as_itself():
    model = _model()
    assert isinstance(model, SimilarityModel) and isinstance(model, keras.Model)
    assert keras.saving.get_registered_name(SimilarityModel) == "Similarity>SimilarityModel"
    assert type(keras.models.clone_model(model)) is SimilarityModel


def test_index_and_lookup_are_the_nearest_embeddings():
    model = _model()
    model.compile("sgd", "mse", distance="l2")
    x, y = _data()
    model.index(x, y, data=np.arange(len(x)), verbose=0)
    queries, _ = _data(seed=1, n=5)
    lookups = model.lookup(queries, k=4, verbose=0)
    keys = model.predict(x, verbose=0)
    _check_lookups(lookups, model.predict(queries, verbose=0), keys, y, 4)
    assert [n.data for n in lookups[0]] == _loop_neighbours(
        model.predict(queries[:1], verbose=0), keys, 4
    )[0][0].tolist()
    _same_neighbours([model.single_lookup(queries[0], k=4)], lookups[:1])
    model.index_single(queries[0], y=9, data=-1, verbose=0)
    assert model.index_size() == len(x) + 1
    assert model.single_lookup(queries[0], k=1)[0].label == 9


def test_save_and_load_keep_the_class_compile_settings_and_lookups(tmp_path):
    model = _model()
    model.compile("adam", "mse", distance="l2")
    x, y = _data()
    model.fit(x, np.zeros((len(x), 3)), epochs=1, batch_size=16, verbose=0)
    model.index(x, y, verbose=0)
    queries, query_labels = _data(seed=2, n=20)
    model.calibrate(queries, query_labels, thresholds_targets={"0.5": 0.5}, verbose=0)
    before = model.lookup(queries, k=3, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    assert (tmp_path / "model.index" / "index_metadata.json").is_file()

    reloaded = keras.saving.load_model(path)
    assert type(reloaded) is SimilarityModel
    assert reloaded.optimizer is not None and reloaded._index.distance.name == "euclidean"
    assert reloaded.index_size() == 0
    reloaded.load_index(path)
    assert reloaded.lookup(queries, k=3, verbose=0) == before
    assert reloaded.match(queries, cutpoint="all") == model.match(queries, cutpoint="all")


def test_load_index_refuses_another_distance_and_keeps_the_index(tmp_path):
    model = _model()
    model.compile("sgd", "mse", distance="l2")
    x, y = _data()
    model.index(x, y, verbose=0)
    model.save_index(tmp_path / "m.keras")
    other = _model()
    other.compile("sgd", "mse", distance="cosine")
    other.index(x[:5], y[:5], verbose=0)
    with pytest.raises(ValueError, match="saved with distance 'euclidean', not 'cosine'"):
        other.load_index(tmp_path / "m.keras")
    assert other.index_size() == 5
    wider = _model(outputs=2)
    wider.compile("sgd", "mse", distance="l2", embedding_output=1)
    with pytest.raises(ValueError, match="size 3, not 4"):
        wider.load_index(tmp_path / "m.keras")


def test_multi_output_model_indexes_the_chosen_output():
    model = _model(outputs=2)
    model.compile("sgd", ["mse", "mse"], distance="l2", embedding_output=1)
    x, y = _data()
    model.index(x, y, verbose=0)
    lookups = model.lookup(x[:4], k=3, verbose=0)
    keys = model.predict(x, verbose=0)[1]
    _check_lookups(lookups, keys[:4], keys, y, 3)
    with pytest.raises(ValueError, match="embedding_output=2"):
        model.create_index(embedding_output=2)


def test_a_feature_map_model_compiles_and_trains_but_cannot_index():
    inputs = keras.Input((4, 4, 2))
    model = SimilarityModel(inputs, keras.layers.Conv2D(3, 1)(inputs))
    model.compile("sgd", "mse")
    images = np.zeros((4, 4, 4, 2), np.float32)
    model.fit(images, np.zeros((4, 4, 4, 3)), verbose=0)
    with pytest.raises(ValueError, match=r"needs \[batch, dim\] embeddings"):
        model.index(images, [0, 1, 2, 3])


def test_distance_auto_takes_the_loss_distance():
    class DistanceLoss(keras.losses.MeanSquaredError):
        distance = "l1"

    model = _model()
    model.compile("sgd", DistanceLoss(), distance="auto")
    assert model._index.distance.name == "manhattan"
    # A loss without a distance (0.17 raised) and no loss at all index with cosine.
    model.compile("sgd", "mse", distance="auto")
    assert model._index.distance.name == "cosine"
    model.compile("sgd")
    assert model._index.distance.name == "cosine"


def test_distance_defaults_to_the_loss_distance_as_in_017(tmp_path):
    model = _model()
    model.compile("sgd", TripletLoss(distance="l2"))
    assert model._index.distance.name == "euclidean"
    model.compile("sgd", TripletLoss(distance="l2"), distance="l1")  # explicit wins
    assert model._index.distance.name == "manhattan"
    model.compile("sgd", MultiSimilarityLoss())
    assert model._index.distance.name == "cosine"

    two = _model(outputs=2)
    two.compile("sgd", ["mse", TripletLoss(distance="l2")], embedding_output=1)
    assert two._index.distance.name == "euclidean"
    two.compile(
        "sgd", {"embedding0": "mse", "embedding1": PNLoss(distance="l1")}, embedding_output=1
    )
    assert two._index.distance.name == "manhattan"

    model.compile("sgd", TripletLoss(distance="l2"))
    model.save(tmp_path / "model.keras")
    assert keras.saving.load_model(tmp_path / "model.keras")._index.distance.name == "euclidean"


def test_save_takes_017s_positional_order(tmp_path):
    # 0.17: save(filepath, save_index, compression, overwrite, include_optimizer, ...).
    model = _model()
    model.compile("sgd", "mse", distance="l2")
    x, y = _data()
    model.index(x, y, verbose=0)
    model.save(tmp_path / "no_index.keras", False)
    assert (tmp_path / "no_index.keras").is_file()
    assert not (tmp_path / "no_index.index").exists()
    model.save(tmp_path / "plain.keras", True, False, True, True)
    reloaded = keras.saving.load_model(tmp_path / "plain.keras")
    reloaded.load_index(tmp_path / "plain.keras")
    assert reloaded.index_size() == len(x)
    with pytest.raises(ValueError, match="model.export"):
        model.save(tmp_path / "saved_model.keras", True, True, True, True, None, {"serve": None})
    assert not (tmp_path / "saved_model.keras").exists()


def test_calibrate_match_and_evaluate_retrieval_run_through_the_index():
    model = _model()
    model.compile("sgd", "mse", distance="l2")
    x, y = _data(n=60)
    model.index(x, y, verbose=0)
    queries, query_labels = _data(seed=3, n=30)
    results = model.calibrate(queries, query_labels, verbose=0)
    assert set(results.cutpoints) == {"optimal"}
    optimal = results.cutpoints["optimal"]
    keys = model.predict(x, verbose=0)
    nearest = _loop_neighbours(model.predict(queries, verbose=0), keys, 1)
    # Thresholded on the search's own float32 distances: a loop's float64 one may fall
    # on the other side of a cutpoint that is itself one of those distances.
    expected = [
        n[0].label if n[0].distance <= optimal["distance"] else -1
        for n in model.lookup(queries, k=1, verbose=0)
    ]
    assert model.match(queries) == expected
    recall = model.evaluate_retrieval(queries, query_labels, [RecallAtK(k=1)], verbose=0)
    assert recall["recall@1"] == pytest.approx(
        np.mean(
            [y[order[0]] == label for (order, _), label in zip(nearest, query_labels, strict=True)]
        )
    )
    evaluation = model.evaluate_classification(queries, query_labels, verbose=0)
    assert evaluation["optimal"]["distance"] == optimal["distance"]


def _raises_before_predicting(model, call, message, monkeypatch):
    calls = []
    monkeypatch.setattr(model, "predict", lambda *a, **k: calls.append(1))
    with pytest.raises(ValueError, match=message):
        call()
    assert not calls


def test_bad_input_is_refused_before_predicting_and_the_index_is_unchanged(monkeypatch):
    model = _model()
    model.compile("sgd", "mse")
    x, y = _data()
    empty = [
        (lambda: model.lookup(x, k=1), "index is empty"),
        (lambda: model.calibrate(x, y), "index is empty"),
    ]
    for call, message in empty:
        _raises_before_predicting(model, call, message, monkeypatch)
    monkeypatch.undo()
    model.index(x, y, verbose=0)
    before = model.lookup(x[:3], k=2, verbose=0)
    bad = [
        (lambda: model.index(x[:, :4], y), r"shape \(6,\)"),
        (lambda: model.index(x, y[:-1]), "47 items in y for 48"),
        (lambda: model.index(x, y, data=[1, 2]), "2 items in data"),
        (lambda: model.lookup(x[:, :5], k=1), r"shape \(6,\)"),
        (lambda: model.calibrate(x, y[:3]), "3 items in y"),
        (lambda: model.evaluate_retrieval(x, None, [RecallAtK(k=1)]), "y is required"),
        (lambda: model.match(x), "not calibrated"),
    ]
    for call, message in bad:
        _raises_before_predicting(model, call, message, monkeypatch)
    monkeypatch.undo()
    assert model.index_size() == len(x)
    assert model.lookup(x[:3], k=2, verbose=0) == before
    model.calibrate(x, y, verbose=0)
    _raises_before_predicting(
        model, lambda: model.match(x, cutpoint="0.9"), "No cutpoint '0.9'", monkeypatch
    )


def test_fit_under_a_strategy_and_index_inside_and_outside_its_scope():
    strategy = mirrored_strategy(2)
    x, y = _data(n=64)
    centroids = np.eye(3, dtype=np.float32)[y]
    with strategy.scope():
        model = _model()
        model.compile(keras.optimizers.SGD(0.1), keras.losses.MeanSquaredError(), distance="l2")
    history = model.fit(x, centroids, epochs=3, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    with strategy.scope():
        model.index(x, y, verbose=0)
        inside = model.lookup(x[:7], k=5, verbose=0)
        one = model.single_lookup(x[0], k=5)
    outside = model.lookup(x[:7], k=5, verbose=0)
    _same_neighbours(inside, outside)
    _same_neighbours([one], inside[:1])
    # The reference embeddings: a plain call of the model, no strategy involved.
    keys = np.asarray(model(x, training=False))
    _check_lookups(outside, keys[:7], keys, y, 5)


def test_backbone_builder_returns_a_similarity_model():
    inputs = keras.Input((8, 8, 3))
    backbone = keras.Model(inputs, keras.layers.Conv2D(4, 3, padding="same")(inputs))
    model = BackboneSim(backbone, embedding_size=5, pooling="avg")
    assert type(model) is SimilarityModel
    model.compile("sgd", "mse")
    images = np.random.default_rng(0).random((10, 8, 8, 3)).astype(np.float32)
    model.index(images, np.arange(10), verbose=0)
    assert [n.label for n in model.single_lookup(images[4], k=1)] == [4]


def test_contrastive_model_indexes_its_backbone():
    keras.utils.set_random_seed(0)
    inputs = keras.Input(SHAPE)
    backbone = keras.Model(inputs, keras.layers.Dense(4)(inputs))
    model = create_contrastive_model(backbone, "simclr")
    assert isinstance(model, ContrastiveModel)
    model.create_index(distance="l2")
    x, y = _data()
    model.index(x, y, verbose=0)
    lookups = model.lookup(x[:5], k=3, verbose=0)
    keys = backbone.predict(x, verbose=0)
    _check_lookups(lookups, keys[:5], keys, y, 3)
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        model.lookup(x[:, :2])


def test_a_search_instance_survives_the_keras_round_trip(tmp_path):
    pytest.importorskip("faiss")
    from tensorflow_similarity.search import FaissSearch

    model = _model()
    model.compile("sgd", "mse", distance="l2", search=FaissSearch("l2", dim=3, algo="hnsw"))
    x, y = _data()
    model.index(x, y, verbose=0)
    before = model.lookup(x[:4], k=3, verbose=0)
    model.save(tmp_path / "model.keras")
    reloaded = keras.saving.load_model(tmp_path / "model.keras")
    assert reloaded._index.search.get_config() == model._index.search.get_config()
    reloaded.load_index(tmp_path / "model.keras")
    assert type(reloaded._index.search) is FaissSearch
    assert reloaded.lookup(x[:4], k=3, verbose=0) == before
