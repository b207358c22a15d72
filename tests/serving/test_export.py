"""`serving.export_model`: the SavedModel's `embed` and `lookup` against the Keras model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from tensorflow_similarity.models import ContrastiveModel, SimilarityModel
from tensorflow_similarity.serving import (
    MAX_INDEX_BYTES,
    SimilarityServing,
    TFLiteSignature,
    check_index_size,
    convert_to_tflite,
    export_model,
    snapshot_index,
)
from tests.serving.glyphs_export import DUPLICATES, QUERIES, K

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(trained):
    return tf.saved_model.load(str(trained.export.path))


def unit_rows(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_export_writes_both_signatures_and_says_what_it_holds(trained):
    export = trained.export
    assert export.signatures == ("embed", "lookup")
    assert (export.k, export.index_size, export.distance) == (K, len(trained.index_x), "cosine")
    manifest = json.loads((export.path / "serving.json").read_text())
    assert manifest["input"] == {"name": "images", "shape": [None, 16, 16, 3], "dtype": "float32"}
    assert manifest["signatures"] == ["embed", "lookup"]
    assert not list(export.path.parent.glob(".*")), "a staging folder was left"


def test_signature_specs(served):
    embed, lookup = served.signatures["embed"], served.signatures["lookup"]
    spec = embed.structured_input_signature[1]["images"]
    assert (spec.shape.as_list(), spec.dtype) == ([None, 16, 16, 3], tf.float32)
    assert lookup.structured_input_signature[1]["images"] == spec
    assert {name: (s.dtype, s.shape.as_list()) for name, s in embed.structured_outputs.items()} == {
        "embeddings": (tf.float32, [None, 16])
    }
    outputs = {name: (s.dtype, s.shape.as_list()) for name, s in lookup.structured_outputs.items()}
    assert outputs == {
        "ids": (tf.int64, [None, K]),
        "distances": (tf.float32, [None, K]),
        "labels": (tf.int64, [None, K]),
        "label_names": (tf.string, [None, K]),
    }


def test_embed_equals_the_models_normalised_embeddings(trained, served):
    found = served.signatures["embed"](images=tf.constant(trained.queries))["embeddings"].numpy()
    expected = unit_rows(trained.model.predict(trained.queries, verbose=0))
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6)
    # Inference batch norm (synchronised in the model): an image alone embeds as in a batch.
    alone = served.signatures["embed"](images=tf.constant(trained.queries[3:4]))["embeddings"]
    np.testing.assert_allclose(alone.numpy()[0], found[3], rtol=1e-5, atol=1e-6)


def test_lookup_equals_model_lookup_on_50_queries_ties_included(trained, served):
    model, queries = trained.model, trained.queries
    assert len(queries) == QUERIES
    found = {
        name: value.numpy()
        for name, value in served.signatures["lookup"](images=tf.constant(queries)).items()
    }
    lookups = model.lookup(queries, k=K, verbose=0)
    ids, _ = model._index.search.batch_lookup(model.predict(queries, verbose=0), k=K)
    np.testing.assert_array_equal(found["ids"], ids)
    np.testing.assert_array_equal(found["labels"], [[n.label for n in row] for row in lookups])
    names = [[trained.class_names[n.label].encode() for n in row] for row in lookups]
    assert found["label_names"].tolist() == names
    np.testing.assert_allclose(
        found["distances"], [[n.distance for n in row] for row in lookups], rtol=1e-5, atol=1e-6
    )
    # The queries indexed twice: two records at distance 0, in the order they were indexed.
    first_copy = len(trained.index_x) - DUPLICATES
    for row, position in zip(found["ids"][-DUPLICATES:], range(DUPLICATES), strict=True):
        assert row[:2].tolist() == [position, first_copy + position]
    np.testing.assert_allclose(found["distances"][-DUPLICATES:, :2], 0.0, atol=1e-6)


def test_the_artefact_holds_tensorflow_ops_only_and_no_package_object(trained):
    raw = (trained.export.path / "saved_model.pb").read_bytes()
    assert b"tensorflow_similarity" not in raw and b"Similarity>" not in raw
    saved = saved_model_pb2.SavedModel.FromString(raw)
    ops = set()
    for graph in saved.meta_graphs:
        ops |= {node.op for node in graph.graph_def.node}
        for function in graph.graph_def.library.function:
            ops |= {node.op for node in function.node_def}
    functions = {f.signature.name for g in saved.meta_graphs for f in g.graph_def.library.function}
    unknown = {op for op in ops if op not in functions and not hasattr(tf.raw_ops, op)}
    assert not unknown
    assert not [op for op in ops if "Collective" in op or "Nccl" in op]
    assert "TopKV2" in ops


# Inputs a served signature must refuse (or, the empty batch, answer): name -> (shape, fill).
BAD_INPUTS = {
    "8x8": ((2, 8, 8, 3), "0.5"),
    "16x8": ((1, 16, 8, 3), "0.5"),
    "32x32": ((1, 32, 32, 3), "0.5"),
    "one channel": ((1, 16, 16, 1), "0.5"),
    "rank 3": ((16, 16, 3), "0.5"),
    "nan pixel": ((2, 16, 16, 3), "nan"),
    "infinite pixel": ((1, 16, 16, 3), "inf"),
    "empty batch": ((0, 16, 16, 3), "0.5"),
}


@pytest.fixture(scope="module")
def blocked(trained, tmp_path_factory):
    """What the export answers, loaded where tensorflow_similarity cannot be imported."""
    folder = tmp_path_factory.mktemp("blocked")
    np.save(folder / "queries.npy", trained.queries)
    script = textwrap.dedent(
        f"""
        import json
        import sys

        class Blocked:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "tensorflow_similarity":
                    raise ImportError("blocked: " + name)

        sys.meta_path.insert(0, Blocked())
        try:
            import tensorflow_similarity  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("tensorflow_similarity was importable")
        import numpy as np
        import tensorflow as tf

        served = tf.saved_model.load({str(trained.export.path)!r})
        queries = tf.constant(np.load({str(folder / "queries.npy")!r}))
        found = dict(served.signatures["lookup"](images=queries))
        found.update(served.signatures["embed"](images=queries))
        np.savez({str(folder / "found.npz")!r}, **{{k: v.numpy() for k, v in found.items()}})
        answers = {{}}
        for name, (shape, fill) in {BAD_INPUTS!r}.items():
            images = np.full(shape, 0.5, np.float32)
            images.reshape(-1)[:1] = float(fill)
            for signature in ("embed", "lookup"):
                try:
                    outputs = served.signatures[signature](images=tf.constant(images))
                except tf.errors.InvalidArgumentError as error:
                    answers[f"{{signature}} {{name}}"] = "refused: " + error.message
                else:
                    answers[f"{{signature}} {{name}}"] = {{
                        k: list(v.shape) for k, v in outputs.items()
                    }}
        with open({str(folder / "answers.json")!r}, "w") as file:
            json.dump(answers, file)
        assert not [m for m in sys.modules if m.startswith("tensorflow_similarity")]
        """
    )
    # The repository on the path: without the blocker the package would import.
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads((folder / "answers.json").read_text())
    return np.load(folder / "found.npz", allow_pickle=True), answers


def test_the_artefact_loads_and_answers_where_the_package_cannot_be_imported(
    trained, served, blocked
):
    found, _ = blocked
    here = served.signatures["lookup"](images=tf.constant(trained.queries))
    for name in ("ids", "labels", "label_names", "distances"):
        np.testing.assert_array_equal(found[name], here[name].numpy())
    np.testing.assert_allclose(
        found["embeddings"],
        unit_rows(trained.model.predict(trained.queries, verbose=0)),
        rtol=1e-5,
        atol=1e-6,
    )


@pytest.mark.parametrize("signature", ["embed", "lookup"])
@pytest.mark.parametrize("case", [case for case in BAD_INPUTS if case != "empty batch"])
def test_the_artefact_refuses_other_shapes_and_non_finite_pixels(blocked, signature, case):
    answer = blocked[1][f"{signature} {case}"]
    assert isinstance(answer, str), f"{signature} answered {case}: {answer}"
    if "pixel" in case:
        assert f"{signature}: images hold NaN or infinite pixels" in answer
    else:
        expected = f"{signature} takes images of shape [batch, 16, 16, 3] (float32)"
        assert expected in answer and "Got a batch of shape" in answer
        assert str(list(BAD_INPUTS[case][0])).replace(",", "")[1:-1] in answer


def test_the_artefact_answers_an_empty_batch_with_empty_outputs(blocked):
    answers = blocked[1]
    assert answers["embed empty batch"] == {"embeddings": [0, 16]}
    assert answers["lookup empty batch"] == {name: [0, K] for name in answers["lookup empty batch"]}
    assert set(answers["lookup empty batch"]) == {"ids", "distances", "labels", "label_names"}


def _interpreter_outputs(path: Path, signature: str, images: np.ndarray) -> dict[str, np.ndarray]:
    interpreter = tf.lite.Interpreter(model_path=str(path))
    return interpreter.get_signature_runner(signature)(images=images)


def test_tflite_embed_and_lookup_match_the_keras_model(trained, served):
    embed_file, lookup_file = trained.export.tflite_files
    queries = trained.queries
    found = _interpreter_outputs(embed_file, "embed", queries)["embeddings"]
    expected = unit_rows(trained.model.predict(queries, verbose=0))
    # Float32 rounding: the converter fuses and reorders ops, each difference well under 1e-6.
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6)
    looked_up = _interpreter_outputs(lookup_file, "lookup", queries)
    here = served.signatures["lookup"](images=tf.constant(queries))
    np.testing.assert_array_equal(looked_up["ids"], here["ids"].numpy())
    np.testing.assert_array_equal(looked_up["labels"], here["labels"].numpy())
    np.testing.assert_allclose(looked_up["distances"], here["distances"].numpy(), atol=1e-6)


@pytest.mark.parametrize(
    "case, shape, dtype, fill, message",
    [
        ("8x8", (1, 8, 8, 3), np.float32, 0.5, r"shape \[batch, 16, 16, 3\] float32; got \[1, 8"),
        ("32x32", (1, 32, 32, 3), np.float32, 0.5, r"got \[1, 32, 32, 3\]. Resize"),
        ("channels", (2, 16, 16, 1), np.float32, 0.5, r"got \[2, 16, 16, 1\]"),
        ("rank 3", (16, 16, 3), np.float32, 0.5, r"got \[16, 16, 3\]"),
        ("float64", (1, 16, 16, 3), np.float64, 0.5, r"got float64. Convert"),
        ("nan", (2, 16, 16, 3), np.float32, np.nan, "hold 1 NaN or infinite pixels"),
        ("inf", (1, 16, 16, 3), np.float32, np.inf, "hold 1 NaN or infinite pixels"),
    ],
)
def test_tflite_signature_refuses_other_shapes_and_non_finite_pixels(
    trained, case, shape, dtype, fill, message
):
    images = np.full(shape, 0.5, dtype)
    images.reshape(-1)[:1] = fill
    for file in trained.export.tflite_files:
        with pytest.raises(ValueError, match=message):
            TFLiteSignature(file)(images)


def test_tflite_signature_answers_as_the_interpreter_and_an_empty_batch_empty(trained):
    embed_file, lookup_file = trained.export.tflite_files
    lookup = TFLiteSignature(lookup_file)
    assert (lookup.signature, lookup.input_shape) == ("lookup", (16, 16, 3))
    found = lookup(trained.queries)
    expected = _interpreter_outputs(lookup_file, "lookup", trained.queries)
    for name in ("ids", "labels", "label_names", "distances"):
        np.testing.assert_array_equal(found[name], expected[name])
    # The graph itself answers an empty batch (XNNPack fails on a batch of none otherwise).
    raw = _interpreter_outputs(lookup_file, "lookup", np.zeros((0, 16, 16, 3), np.float32))
    assert {name: value.shape for name, value in raw.items()} == {name: (0, K) for name in raw}
    empty = lookup(np.zeros((0, 16, 16, 3), np.float32))
    assert {name: (v.shape, v.dtype) for name, v in empty.items()} == {
        name: ((0, K), expected[name].dtype) for name in expected
    }
    assert TFLiteSignature(embed_file)(np.zeros((0, 16, 16, 3), np.float32))[
        "embeddings"
    ].shape == (0, 16)
    with pytest.raises(ValueError, match=r"signatures \['lookup'\]; got signature='embed'"):
        TFLiteSignature(lookup_file, "embed")


def test_uint8_input_scales_in_the_graph(trained, tmp_path):
    images = np.round(trained.queries[:10] * 255).astype(np.uint8)
    export = export_model(trained.model, tmp_path / "u8", k=K, uint8_input=True, verbose=0)
    served = tf.saved_model.load(str(export.path))
    spec = served.signatures["embed"].structured_input_signature[1]["images"]
    assert spec.dtype == tf.uint8
    found = served.signatures["embed"](images=tf.constant(images))["embeddings"].numpy()
    scaled = images.astype(np.float32) / 255.0
    np.testing.assert_allclose(
        found, unit_rows(trained.model.predict(scaled, verbose=0)), rtol=1e-5, atol=1e-6
    )
    found = served.signatures["lookup"](images=tf.constant(images))
    lookups = trained.model.lookup(scaled, k=K, verbose=0)
    np.testing.assert_array_equal(found["labels"], [[n.label for n in row] for row in lookups])


def tiny_model(distance: str = "cosine", dim: int = 4) -> SimilarityModel:
    inputs = keras.Input((6,))
    model = SimilarityModel(inputs, keras.layers.Dense(dim, name="embedding")(inputs))
    model.compile("adam", distance=distance)
    return model


@pytest.mark.parametrize(
    "distance", ["cosine", "l2", "squared_euclidean", "inner_product", "manhattan", "snr"]
)
def test_lookup_follows_the_index_distance(distance):
    model = tiny_model(distance)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(30, 6)).astype(np.float32)
    # Rows 0-4 indexed twice, and queried: ties.
    model.index(np.concatenate([x, x[:5]]), np.arange(35) % 3, verbose=0)
    queries = np.concatenate([rng.normal(size=(15, 6)).astype(np.float32), x[:5]])
    module = SimilarityServing(
        model._serving_embeddings,
        (6,),
        model._index.distance,
        index=snapshot_index(model._index),
        k=4,
    )
    found = module.lookup(tf.constant(queries))
    embeddings = model.predict(queries, verbose=0)
    # What the index holds: unit rows for cosine (a Dense layer's outputs are not), else as is.
    held = unit_rows(embeddings) if distance == "cosine" else embeddings
    np.testing.assert_allclose(module.embed(tf.constant(queries))["embeddings"], held, rtol=1e-5)
    ids, distances = model._index.search.batch_lookup(embeddings, k=4)
    np.testing.assert_array_equal(found["ids"], ids)
    np.testing.assert_allclose(found["distances"], distances, rtol=1e-5, atol=1e-6)
    lookups = model.lookup(queries, k=4, verbose=0)
    np.testing.assert_array_equal(found["labels"], [[n.label for n in row] for row in lookups])


def test_k_above_the_index_size_returns_the_whole_index_as_lookup_does(tmp_path):
    model = tiny_model()
    x = np.random.default_rng(2).normal(size=(6, 6)).astype(np.float32)
    model.index(x, [0, 1, 2, 0, 1, 2], verbose=0)
    with pytest.warns(UserWarning, match="k=10 .* holds 6"):
        export = export_model(model, tmp_path / "all", k=10, verbose=0)
    assert export.k == 6
    served = tf.saved_model.load(str(export.path))
    found = served.signatures["lookup"](images=tf.constant(x))
    with pytest.warns(UserWarning, match="k=10"):
        lookups = model.lookup(x, k=10, verbose=0)
    assert found["ids"].shape == (6, 6)
    np.testing.assert_array_equal(found["labels"], [[n.label for n in row] for row in lookups])
    np.testing.assert_array_equal(np.sort(found["ids"].numpy(), axis=1), [list(range(6))] * 6)
    assert found["label_names"].numpy()[0].tolist() == [str(n.label).encode() for n in lookups[0]]


def test_a_model_without_an_index_exports_embed_only(tmp_path, capsys):
    inputs = keras.Input((6,))
    model = SimilarityModel(inputs, keras.layers.Dense(3)(inputs))
    export = export_model(model, tmp_path / "embed", k=3)
    assert export.signatures == ("embed",) and export.k is None
    assert "the model's index is empty" in export.note
    assert "embed only (the model's index is empty: no lookup)" in capsys.readouterr().out
    served = tf.saved_model.load(str(export.path))
    assert set(served.signatures) == {"embed"}
    model = tiny_model()
    model.index(np.eye(6, dtype=np.float32), np.arange(6), verbose=0)
    export = export_model(model, tmp_path / "left-out", include_index=False, verbose=0)
    assert export.signatures == ("embed",) and export.note == "include_index=False"


def test_a_contrastive_model_exports_its_backbone_and_index(tmp_path):
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, use_bias=False)(inputs)
    x = keras.layers.BatchNormalization()(x)
    backbone = keras.Model(inputs, keras.layers.GlobalAveragePooling2D()(x), name="backbone")
    head = keras.Input((4,))
    projected = keras.layers.BatchNormalization()(keras.layers.Dense(8)(head))
    projector = keras.Model(head, projected, name="projector")
    model = ContrastiveModel(backbone, projector, algorithm="simclr", sync_bn=True)
    images = np.random.default_rng(3).random((12, 8, 8, 3)).astype(np.float32)
    expected = unit_rows(model.embed(images))

    export = model.export_serving(tmp_path / "no-index", verbose=0)
    assert export.signatures == ("embed",)
    served = tf.saved_model.load(str(export.path))
    np.testing.assert_allclose(
        served.signatures["embed"](images=tf.constant(images))["embeddings"],
        expected,
        rtol=1e-5,
        atol=1e-6,
    )
    # Only the backbone's variables are saved (not the projector's).
    assert len(served.network_variables) == len(backbone.variables)

    model.compile(optimizer="adam")
    model.index(images, np.arange(12) % 3, verbose=0)
    export = model.export_serving(tmp_path / "index", k=3, verbose=0)
    served = tf.saved_model.load(str(export.path))
    found = served.signatures["lookup"](images=tf.constant(images))
    lookups = model.lookup(images, k=3, verbose=0)
    np.testing.assert_array_equal(found["labels"], [[n.label for n in row] for row in lookups])
    np.testing.assert_allclose(
        found["distances"], [[n.distance for n in row] for row in lookups], atol=1e-6
    )


def test_an_index_over_the_limit_is_refused_before_anything_is_written(tmp_path):
    model = tiny_model()
    model.index(np.eye(6, dtype=np.float32), np.arange(6), verbose=0)
    path = tmp_path / "too-large"
    with pytest.raises(ValueError, match=r"over the limit of .*IndexServer") as error:
        export_model(model, path, max_index_bytes=100, index_location="graph", verbose=0)
    assert "MAX_INDEX_BYTES" in str(error.value) and "include_index=False" in str(error.value)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_the_limit_is_one_gibibyte_of_index():
    assert MAX_INDEX_BYTES == 2**30
    # 1,000,000 embeddings of 256 float32 (1.02 GB with their ids, labels and norms) fit;
    # 1,100,000 do not, nor 1,000,000 of 512 (2.06 GB: past what a protocol buffer holds).
    check_index_size(1_000_000, 256)
    for size, dim in ((1_100_000, 256), (1_000_000, 512)):
        with pytest.raises(ValueError, match="over the limit of 1024 MiB"):
            check_index_size(size, dim)


def test_an_existing_destination_is_refused_unless_overwrite_replaces_an_export(tmp_path):
    model = tiny_model()
    model.index(np.eye(6, dtype=np.float32), np.arange(6), verbose=0)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for overwrite in (False, True):
        with pytest.raises(FileExistsError, match="mine"):
            export_model(model, mine, overwrite=overwrite, verbose=0)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    path = tmp_path / "served"
    export_model(model, path, k=2, verbose=0)
    before = (path / "saved_model.pb").read_bytes()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export_model(model, path, k=3, verbose=0)
    assert (path / "saved_model.pb").read_bytes() == before
    assert export_model(model, path, k=3, overwrite=True, verbose=0).k == 3
    served = tf.saved_model.load(str(path))
    assert served.signatures["lookup"].structured_outputs["ids"].shape.as_list() == [None, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "served"]


def test_convert_to_tflite_refuses_an_unknown_signature(trained):
    with pytest.raises(ValueError):
        convert_to_tflite(trained.export.path, "nearest")


def test_the_index_is_saved_as_variables_beside_a_small_saved_model_pb(tmp_path):
    model = tiny_model(dim=64)
    x = np.random.default_rng(4).normal(size=(4000, 6)).astype(np.float32)
    model.index(x, np.arange(4000) % 7, verbose=0)
    export = export_model(model, tmp_path / "served", verbose=0)
    keys_bytes = 4000 * 64 * 4
    variables = sum(p.stat().st_size for p in (export.path / "variables").iterdir())
    assert keys_bytes < variables < keys_bytes + 4000 * 20 + 100_000
    # The graph and the class names (a few bytes an item), not the embeddings.
    assert (export.path / "saved_model.pb").stat().st_size < 100_000
    served = tf.saved_model.load(str(export.path))
    np.testing.assert_array_equal(served.index_embeddings, model._index.search.key_arrays()[0])
    assert served.index_ids.numpy().tolist() == list(range(4000))


def test_a_faiss_index_is_searched_exactly_over_its_embeddings(tmp_path):
    inputs = keras.Input((6,))
    model = SimilarityModel(inputs, keras.layers.Dense(4)(inputs))
    model.compile("adam", distance="cosine", search="faiss")
    rng = np.random.default_rng(5)
    model.index(rng.normal(size=(40, 6)).astype(np.float32), np.arange(40) % 5, verbose=0)
    queries = rng.normal(size=(10, 6)).astype(np.float32)
    export = export_model(model, tmp_path / "served", k=3, verbose=0)
    found = tf.saved_model.load(str(export.path)).signatures["lookup"](images=queries)
    lookups = model.lookup(queries, k=3, verbose=0)
    np.testing.assert_array_equal(found["labels"], [[n.label for n in row] for row in lookups])
    np.testing.assert_allclose(
        found["distances"], [[n.distance for n in row] for row in lookups], atol=1e-5
    )
