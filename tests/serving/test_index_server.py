"""An index saved beside the SavedModel (`index_location="external"`) and `IndexServer`."""

from __future__ import annotations

import json
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.models import SimilarityModel, StaleIndexError
from tensorflow_similarity.search import FaissOnDiskSearch, MilvusSearch
from tensorflow_similarity.serving import IndexServer, export_model

NAMES = ["ant", "bee", "cat"]
K = 4


def _data():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(40, 6)).astype(np.float32)
    # Item 39 is indexed without a label: label -1, name "".
    return x, [int(v) for v in np.arange(39) % 3] + [None]


def _model(search="linear"):
    keras.utils.set_random_seed(3)
    inputs = keras.Input((6,))
    model = SimilarityModel(inputs, keras.layers.Dense(4, name="embedding")(inputs))
    model.compile("adam", distance="cosine", search=search)
    x, y = _data()
    model.index(x[:39], y[:39], verbose=0)
    model.index_single(x[39], verbose=0)
    return model


def _search(name, folder):
    if name == "faiss_ondisk":
        # nprobe == nlist: every list is searched, so lookups are exact and comparable.
        return FaissOnDiskSearch("cosine", dim=4, nlist=2, nprobe=2, train_size=8)
    if name == "milvus":
        pytest.importorskip("pymilvus")
        pytest.importorskip("milvus_lite")
        # Milvus Lite; the export's index folder names this database and collection.
        return MilvusSearch("cosine", dim=4, uri=str(folder / "index.db"), collection="served")
    return name


@pytest.fixture(scope="module", params=["linear", "faiss_ondisk", "milvus"])
def exported(request, tmp_path_factory):
    """A tiny model, its index (`request.param`), and its export with the index beside it."""
    folder = tmp_path_factory.mktemp("external")
    model = _model(_search(request.param, folder))
    path = folder / "served"
    # A limit of one byte: the smallest index is over it, so "auto" saves it beside.
    with pytest.warns(UserWarning, match="saved beside the SavedModel .*IndexServer"):
        export = export_model(model, path, k=K, class_names=NAMES, max_index_bytes=1, verbose=0)
    return model, export


def _lookup_reference(model, images, k):
    """`model.lookup` as the four `[n, k]` arrays of the `lookup` signature."""
    rows = model.lookup(images, k=k, verbose=0)
    ids = np.array([[n.id for n in row] for row in rows], np.int64).reshape(len(rows), k)
    distances = np.array([[n.distance for n in row] for row in rows], np.float64)
    labels = [[-1 if n.label is None else n.label for n in row] for row in rows]
    names = [[b"" if n.label is None else NAMES[n.label].encode() for n in row] for row in rows]
    return ids, distances.reshape(len(rows), k), np.array(labels).reshape(len(rows), k), names


def test_the_export_holds_embed_and_the_index_beside_it(exported):
    model, export = exported
    assert export.signatures == ("embed",) and export.index_location == "external"
    assert (export.k, export.index_size) == (K, 40)
    manifest = json.loads((export.path / "serving.json").read_text())
    assert manifest["index_location"] == "external" and manifest["class_names"] == NAMES
    assert "index" in manifest["files"] and manifest["signatures"] == ["embed"]
    assert manifest["embedding_fingerprint"] == model._ix.embedding_fingerprint is not None
    assert Indexer.read_metadata(export.path / "index")["size"] == 40
    assert set(tf.saved_model.load(str(export.path)).signatures) == {"embed"}
    assert not list(export.path.parent.glob(".*")), "a staging folder was left"


def test_index_server_lookup_equals_model_lookup(exported):
    model, export = exported
    server = IndexServer(export.path)
    x, _ = _data()
    queries = np.concatenate([x[::3] + 0.05, x[39:]])  # the unlabelled item is a neighbour
    found = server.lookup(queries)
    assert {name: (t.dtype, t.shape.as_list()) for name, t in found.items()} == {
        "ids": (tf.int64, [len(queries), K]),
        "distances": (tf.float32, [len(queries), K]),
        "labels": (tf.int64, [len(queries), K]),
        "label_names": (tf.string, [len(queries), K]),
    }
    ids, distances, labels, names = _lookup_reference(model, queries, K)
    np.testing.assert_array_equal(found["ids"], ids)
    np.testing.assert_allclose(found["distances"], distances, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(found["labels"], labels)
    assert found["label_names"].numpy().tolist() == names
    assert -1 in labels and b"" in sum(names, [])
    # Another k, and the same images as a tf.Tensor.
    two = server.lookup(tf.constant(queries[:3]), k=2)
    np.testing.assert_array_equal(two["ids"], ids[:3, :2])
    embedded = server.embed(queries)["embeddings"].numpy()
    predicted = model.predict(queries, verbose=0).astype(np.float64)
    np.testing.assert_allclose(
        embedded, predicted / np.linalg.norm(predicted, axis=1, keepdims=True), atol=1e-6
    )


def test_index_server_answers_as_the_in_graph_lookup(exported, tmp_path):
    model, external = exported
    graph = export_model(model, tmp_path / "graph", k=K, class_names=NAMES, verbose=0)
    assert graph.signatures == ("embed", "lookup") and graph.index_location == "graph"
    x, _ = _data()
    queries = x[1::4] - 0.03
    in_graph = tf.saved_model.load(str(graph.path)).signatures["lookup"](images=queries)
    found = IndexServer(external.path).lookup(queries)
    for name in ("ids", "labels", "label_names"):
        assert found[name].dtype == in_graph[name].dtype
        np.testing.assert_array_equal(found[name].numpy(), in_graph[name].numpy())
    np.testing.assert_allclose(found["distances"], in_graph["distances"], atol=1e-6)
    empty = IndexServer(external.path).lookup(np.zeros((0, 6), np.float32))
    empty_graph = tf.saved_model.load(str(graph.path)).signatures["lookup"](images=tf.zeros([0, 6]))
    for name in found:
        assert empty[name].shape == empty_graph[name].shape == (0, K)
        assert empty[name].dtype == empty_graph[name].dtype


def test_bad_images_and_k_are_refused_before_the_network_runs(exported, monkeypatch):
    _, export = exported
    server = IndexServer(export.path)

    def refuse(**_):
        raise AssertionError("the network ran")

    monkeypatch.setattr(server, "_embed", refuse)
    for images, message in [
        (np.zeros((2, 5), np.float32), r"images of shape \[batch, 6\] \(float32\).*\[2, 5\]"),
        (np.zeros((6,), np.float32), r"images of shape \[batch, 6\].*\[6\]"),
        (np.full((1, 6), np.nan, np.float32), "NaN or infinite pixels"),
        (np.array([["a"] * 6]), "dtype <U1"),
    ]:
        with pytest.raises(ValueError, match=message):
            server.lookup(images)
    with pytest.raises(ValueError, match=r"images of shape \[batch, 6\]"):
        server.embed(np.zeros((1, 7), np.float32))
    with pytest.raises(ValueError, match="k"):
        server.lookup(np.zeros((1, 6), np.float32), k=0)


def test_a_missing_or_stale_index_is_refused_before_it_is_read(exported, tmp_path):
    _, export = exported
    copy = tmp_path / "copy"
    shutil.copytree(export.path, copy)
    index = Indexer.load(copy / "index", verbose=0)
    index.embedding_fingerprint = "0" * 64  # an index re-made by other weights
    index.save(copy / "index")
    with pytest.raises(ValueError, match="is stale: its embeddings were made by other weights"):
        IndexServer(copy)
    shutil.rmtree(copy / "index")
    with pytest.raises(FileNotFoundError, match=r"keeps its index in .*index', which is missing"):
        IndexServer(copy)
    with pytest.raises(FileNotFoundError, match="holds no export"):
        IndexServer(tmp_path / "nowhere")


def test_an_export_without_an_external_index_is_refused(tmp_path):
    model = _model()
    graph = export_model(model, tmp_path / "graph", k=2, verbose=0)
    with pytest.raises(ValueError, match=r"its index is in the graph.*signatures\['lookup'\]"):
        IndexServer(graph.path)
    embed = export_model(model, tmp_path / "embed", include_index=False, verbose=0)
    with pytest.raises(ValueError, match="holds no index"):
        IndexServer(embed.path)
    with pytest.raises(ValueError, match="index_location must be one of"):
        export_model(model, tmp_path / "bad", index_location="disk", verbose=0)
    assert not (tmp_path / "bad").exists()


def test_index_location_graph_still_refuses_an_index_over_the_limit(tmp_path):
    with pytest.raises(ValueError, match="over the limit .*index_location='external'"):
        export_model(_model(), tmp_path / "x", index_location="graph", max_index_bytes=1, verbose=0)
    assert not list(tmp_path.iterdir())


def test_a_stale_index_is_refused_by_export_serving_external_too(tmp_path):
    model = _model()
    model.set_weights([w * 0.5 for w in model.get_weights()])
    with pytest.raises(StaleIndexError, match="allow_stale_index=True"):
        model.export_serving(tmp_path / "served", index_location="external", verbose=0)
    assert not list(tmp_path.iterdir())


def test_a_failed_index_save_leaves_the_destination_as_it_was(tmp_path, monkeypatch):
    model = _model()
    path = tmp_path / "served"
    first = export_model(model, path, k=2, index_location="external", verbose=0)
    before = sorted(p.name for p in path.iterdir())

    def full_disk(self, folder, compression=True):
        raise OSError(28, "No space left on device", str(folder))

    monkeypatch.setattr(Indexer, "save", full_disk)
    with pytest.raises(OSError, match="No space left"):
        export_model(model, path, k=3, index_location="external", overwrite=True, verbose=0)
    assert sorted(p.name for p in path.iterdir()) == before
    assert json.loads((path / "serving.json").read_text())["k"] == first.k == 2
    assert [p.name for p in tmp_path.iterdir()] == ["served"], "a staging folder was left"
    monkeypatch.undo()
    again = export_model(model, path, k=3, index_location="external", overwrite=True, verbose=0)
    assert IndexServer(again.path).k == 3


def test_items_upserted_with_the_same_weights_are_served_after_a_save(tmp_path):
    model = _model()
    path = export_model(model, tmp_path / "served", k=1, index_location="external", verbose=0).path
    server = IndexServer(path)
    new = np.full((1, 6), 3.0, np.float32)
    server.index.upsert([1000], server.embed(new)["embeddings"].numpy(), labels=[2])
    server.index.save(path / "index")
    found = IndexServer(path).lookup(new)  # the same fingerprint: not stale
    assert found["ids"].numpy().tolist() == [[1000]]
    assert found["label_names"].numpy().tolist() == [[b"2"]]  # no class names were given


def test_a_uint8_export_takes_uint8_images_only(tmp_path):
    model = _model()
    path = tmp_path / "served"
    export_model(model, path, k=2, uint8_input=True, index_location="external", verbose=0)
    server = IndexServer(path)
    pixels = np.arange(12, dtype=np.uint8).reshape(2, 6) * 20
    found = server.lookup(pixels)
    ids, _, _, _ = _lookup_reference(model, pixels.astype(np.float32) / 255.0, 2)
    np.testing.assert_array_equal(found["ids"], ids)
    with pytest.raises(ValueError, match=r"\(uint8\): 0-255 pixels as uint8. Got float32"):
        server.lookup(pixels.astype(np.float32))


def test_search_options_reach_indexer_load(exported, monkeypatch):
    _, export = exported
    seen = []
    load = Indexer.load.__func__

    def spy(cls, folder, **kwargs):
        seen.append(dict(kwargs))
        kwargs.pop("search_options", None)
        return load(cls, folder, **kwargs)

    monkeypatch.setattr(Indexer, "load", classmethod(spy))
    IndexServer(export.path, search_options={"token": "user:password"})
    assert seen[-1]["search_options"] == {"token": "user:password"}


def test_neighbours_an_approximate_search_did_not_find_are_padded(tmp_path):
    # One list of four probed: fewer than k=30 of the 40 items are found for each query.
    search = FaissOnDiskSearch("cosine", dim=4, nlist=4, nprobe=1, train_size=8)
    model = _model(search)
    export = export_model(model, tmp_path / "served", k=30, index_location="external", verbose=0)
    x, _ = _data()
    found = IndexServer(export.path).lookup(x[:3])
    for row, lookups in enumerate(model.lookup(x[:3], k=30, verbose=0)):
        count = len(lookups)
        assert 0 < count < 30
        assert found["ids"].numpy()[row, :count].tolist() == [n.id for n in lookups]
        assert found["ids"].numpy()[row, count:].tolist() == [-1] * (30 - count)
        assert np.isinf(found["distances"].numpy()[row, count:]).all()
        assert found["labels"].numpy()[row, count:].tolist() == [-1] * (30 - count)
        assert found["label_names"].numpy()[row, count:].tolist() == [b""] * (30 - count)
