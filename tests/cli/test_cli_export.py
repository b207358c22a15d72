"""`tfsim export RUN OUT`: a finished run as a SavedModel, and its clear errors."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.cli import export as cli_export
from tensorflow_similarity.cli import main, run_folder
from tensorflow_similarity.datasets import load_data
from tensorflow_similarity.losses import MultiSimilarityLoss
from tensorflow_similarity.models import ContrastiveModel
from tensorflow_similarity.serving import IndexServer, export_model
from tests.serving.glyphs_export import glyphs_model

SIZE = 8


def _finished_run(folder: Path, model: keras.Model, algorithm: str, class_names: list[str]):
    """A run folder as a finished tfsim run leaves it: run.json, model.keras, model.index/."""
    folder.mkdir()
    run = {"options": {"algorithm": algorithm, "image_size": SIZE}, "class_names": class_names}
    (folder / "run.json").write_text(json.dumps(run))
    model.save(folder / "model.keras")
    run_folder.finish(folder)
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A supervised run (a few steps on glyphs, its training images indexed) and a pretrain run."""
    root = tmp_path_factory.mktemp("export")
    keras.utils.set_random_seed(0)
    data = load_data("glyphs", SIZE, seed=0, limit=160)
    model = glyphs_model(SIZE, embedding_size=8)
    model.compile("adam", loss=MultiSimilarityLoss(), distance="cosine")
    model.fit(data.x_train, data.y_train, batch_size=32, epochs=1, verbose=0)
    model.index(data.x_train, data.y_train, verbose=0)
    supervised = _finished_run(root / "supervised", model, "multisimilarity", data.class_names)

    inputs = keras.Input((SIZE, SIZE, 3))
    pooled = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(inputs))
    head = keras.Input((4,))
    contrastive = ContrastiveModel(
        keras.Model(inputs, pooled),
        keras.Model(head, keras.layers.Dense(4)(head)),
        algorithm="simclr",
    )
    contrastive.compile(optimizer="adam")
    contrastive.optimizer.build(contrastive.trainable_variables)
    pretrain = _finished_run(root / "pretrain", contrastive, "simclr", data.class_names)
    return {"supervised": supervised, "pretrain": pretrain, "data": data}


def test_export_of_a_supervised_run_serves_its_lookup_with_class_names(runs, tmp_path, capsys):
    out = tmp_path / "served"
    assert main(["export", str(runs["supervised"]), str(out), "--k", "3", "--tflite"]) == 0
    printed = capsys.readouterr().out
    assert "signatures embed and lookup (k=3" in printed and "embed.tflite" in printed
    served = tf.saved_model.load(str(out))
    assert set(served.signatures) == {"embed", "lookup"}
    data = runs["data"]
    found = served.signatures["lookup"](images=tf.constant(data.x_test[:6]))
    model = keras.saving.load_model(runs["supervised"] / "model.keras")
    model.load_index(runs["supervised"] / "model.keras")
    lookups = model.lookup(data.x_test[:6], k=3, verbose=0)
    np.testing.assert_array_equal(found["labels"], [[n.label for n in row] for row in lookups])
    names = [[data.class_names[n.label].encode() for n in row] for row in lookups]
    assert found["label_names"].numpy().tolist() == names
    assert (out / "embed.tflite").is_file() and (out / "lookup.tflite").is_file()


def test_index_location_external_is_served_by_index_server(runs, tmp_path, capsys):
    out = tmp_path / "served"
    assert main(["export", str(runs["supervised"]), str(out), "--index-location", "external"]) == 0
    printed = capsys.readouterr().out
    assert "signature embed and, beside it, the index in" in printed and "IndexServer" in printed
    assert set(tf.saved_model.load(str(out)).signatures) == {"embed"}
    data = runs["data"]
    found = IndexServer(out).lookup(data.x_test[:6], k=3)
    model = keras.saving.load_model(runs["supervised"] / "model.keras")
    model.load_index(runs["supervised"] / "model.keras")
    lookups = model.lookup(data.x_test[:6], k=3, verbose=0)
    np.testing.assert_array_equal(found["ids"], [[n.id for n in row] for row in lookups])
    np.testing.assert_array_equal(found["labels"], [[n.label for n in row] for row in lookups])
    names = [[data.class_names[n.label].encode() for n in row] for row in lookups]
    assert found["label_names"].numpy().tolist() == names
    with pytest.raises(SystemExit):
        main(["export", str(runs["supervised"]), str(tmp_path / "x"), "--index-location", "disk"])
    assert "invalid choice: 'disk'" in capsys.readouterr().err


def test_an_index_over_the_limit_goes_beside_unless_graph_is_asked(
    runs, tmp_path, capsys, monkeypatch
):
    def one_byte_limit(*args, **kwargs):
        return export_model(*args, max_index_bytes=1, **kwargs)

    monkeypatch.setattr(cli_export, "export_model", one_byte_limit)
    out = tmp_path / "served"
    assert main(["export", str(runs["supervised"]), str(out), "--index-location", "graph"]) == 2
    error = capsys.readouterr().err
    assert "over the limit" in error and "(--index-location external)" not in error
    assert "Export it with --index-location external" in error and not out.exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said by the command, not as a Python warning
        assert main(["export", str(runs["supervised"]), str(out)]) == 0
    printed = capsys.readouterr().out
    assert "is over the 1 GiB a lookup signature holds, so it is saved beside" in printed
    assert set(tf.saved_model.load(str(out)).signatures) == {"embed"}
    assert IndexServer(out).lookup(runs["data"].x_test[:2])["ids"].shape == (2, 5)


def test_export_of_a_pretrain_run_writes_embed_only_and_says_why(runs, tmp_path, capsys):
    out = tmp_path / "served"
    assert main(["export", str(runs["pretrain"]), str(out)]) == 0
    assert "embed only: the run's index is empty" in capsys.readouterr().out
    assert set(tf.saved_model.load(str(out)).signatures) == {"embed"}


def test_uint8_and_k_above_the_index(runs, tmp_path, capsys):
    out = tmp_path / "served"
    assert main(["export", str(runs["supervised"]), str(out), "--uint8", "--k", "100000"]) == 0
    assert "--k 100000 is larger than the" in capsys.readouterr().out
    lookup = tf.saved_model.load(str(out)).signatures["lookup"]
    assert lookup.structured_input_signature[1]["images"].dtype == tf.uint8
    indexed = len(runs["data"].y_train)
    assert lookup.structured_outputs["ids"].shape.as_list() == [None, indexed]


def _copy(run: Path, folder: Path, without: str | None = None) -> Path:
    shutil.copytree(run, folder)
    if without:
        shutil.rmtree(folder / without)
    return folder


def test_a_run_without_its_index_is_refused_unless_no_index(runs, tmp_path, capsys):
    run = _copy(runs["supervised"], tmp_path / "run", without="model.index")
    assert main(["export", str(run), str(tmp_path / "served")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("tfsim: error:") and "but no index (model.index/)" in error
    assert "--no-index" in error and not (tmp_path / "served").exists()
    assert main(["export", str(run), str(tmp_path / "served"), "--no-index"]) == 0
    assert "signature embed only (--no-index)" in capsys.readouterr().out


def test_files_of_another_run_are_refused(runs, tmp_path, capsys):
    mixed = _copy(runs["supervised"], tmp_path / "mixed", without="model.index")
    shutil.copytree(runs["pretrain"] / "model.index", mixed / "model.index")
    assert main(["export", str(mixed), str(tmp_path / "served")]) == 2
    error = capsys.readouterr().err
    assert "model.index/ is not what its run wrote" in error
    assert "export will not mix two runs" in error and not (tmp_path / "served").exists()
    changed = _copy(runs["supervised"], tmp_path / "changed")
    shutil.copy(runs["pretrain"] / "model.keras", changed / "model.keras")
    assert main(["export", str(changed), str(tmp_path / "served"), "--no-index"]) == 2
    assert "model.keras is not what its run wrote" in capsys.readouterr().err


@pytest.mark.parametrize(
    "case, message",
    [
        ("no run", "holds no tfsim run (no run.json)"),
        ("not a folder", "is not a folder"),
        ("k below 1", "--k must be at least 1"),
    ],
)
def test_bad_runs_and_options_are_clear_errors(runs, tmp_path, capsys, case, message):
    (tmp_path / "empty").mkdir()
    args = {
        "no run": [str(tmp_path / "empty"), str(tmp_path / "out")],
        "not a folder": [str(tmp_path / "nothing"), str(tmp_path / "out")],
        "k below 1": [str(runs["supervised"]), str(tmp_path / "out"), "--k", "0"],
    }[case]
    assert main(["export", *args]) == 2
    error = capsys.readouterr().err
    assert error.startswith("tfsim: error:") and message in error
    assert not (tmp_path / "out").exists()


def test_an_existing_destination_is_kept_unless_overwrite_replaces_an_export(
    runs, tmp_path, capsys
):
    out = tmp_path / "served"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for extra in ([], ["--overwrite"]):
        assert main(["export", str(runs["pretrain"]), str(out), *extra]) == 2
        assert str(out) in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    shutil.rmtree(out)
    assert main(["export", str(runs["pretrain"]), str(out)]) == 0
    before = (out / "saved_model.pb").read_bytes()
    assert main(["export", str(runs["supervised"]), str(out)]) == 2
    error = capsys.readouterr().err
    assert "exists; nothing was written" in error and "or --overwrite to replace" in error
    assert (out / "saved_model.pb").read_bytes() == before
    assert main(["export", str(runs["supervised"]), str(out), "--overwrite"]) == 0
    assert set(tf.saved_model.load(str(out)).signatures) == {"embed", "lookup"}


@pytest.mark.parametrize("inside", ["model.index/served", "backup", ".", ".."])
def test_out_inside_the_run_folder_or_holding_it_is_refused(runs, tmp_path, capsys, inside):
    run = _copy(runs["supervised"], tmp_path / "run")
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    out = run / inside
    assert main(["export", str(run), str(out), "--overwrite"]) == 2
    error = capsys.readouterr().err
    expected = "holds the run folder" if inside == ".." else "is inside the run folder"
    assert error.startswith("tfsim: error:") and expected in error
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before


def test_a_symbolic_link_out_is_refused_and_kept(runs, tmp_path, capsys):
    real, link = tmp_path / "real", tmp_path / "link"
    assert main(["export", str(runs["pretrain"]), str(real)]) == 0
    link.symlink_to(real)
    assert main(["export", str(runs["pretrain"]), str(link), "--overwrite"]) == 2
    error = capsys.readouterr().err
    assert "is a symbolic link" in error and str(real) in error
    assert link.is_symlink() and (real / "saved_model.pb").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_an_out_written_by_another_export_meanwhile_is_a_clear_error(
    runs, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "served"
    save = tf.saved_model.save
    others = []

    def save_while_another_export_lands(*args, **kwargs):
        save(*args, **kwargs)
        if not others:  # The first export's staged model is saved: another one lands now.
            others.append("running")
            others[0] = main(["export", str(runs["pretrain"]), str(out)])

    monkeypatch.setattr(tf.saved_model, "save", save_while_another_export_lands)
    assert main(["export", str(runs["pretrain"]), str(out), "--k", "2"]) == 2
    error = capsys.readouterr().err
    assert others == [0] and error.startswith("tfsim: error:")
    assert "exists; nothing was written" in error and "or --overwrite to replace" in error
    assert set(tf.saved_model.load(str(out)).signatures) == {"embed"}
    assert [p.name for p in tmp_path.iterdir()] == ["served"]
