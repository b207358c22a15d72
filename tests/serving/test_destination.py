"""`serving.destination`: concurrent exports, a kill mid-switch, and what `overwrite` replaces."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import _atomic
from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.serving import destination, export_model


def indexed_model(seed: int) -> SimilarityModel:
    inputs = keras.Input((6,))
    model = SimilarityModel(inputs, keras.layers.Dense(4)(inputs))
    model.compile("adam", distance="cosine")
    x = np.random.default_rng(seed).normal(size=(8, 6)).astype(np.float32)
    model.index(x, np.arange(8) % 3, verbose=0)
    return model


@pytest.fixture(scope="module")
def models():
    return indexed_model(0), indexed_model(1)


def assert_export_of(path: Path, model: SimilarityModel, k: int) -> None:
    """`path` loads and is entirely `model`'s export with `k` neighbours."""
    served = tf.saved_model.load(str(path))
    np.testing.assert_array_equal(served.index_embeddings, model._index.search.key_arrays()[0])
    assert served.signatures["lookup"].structured_outputs["ids"].shape.as_list() == [None, k]
    assert json.loads((path / "serving.json").read_text())["k"] == k
    queries = np.eye(6, dtype=np.float32)
    found = served.signatures["embed"](images=tf.constant(queries))["embeddings"].numpy()
    expected = model.predict(queries, verbose=0)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6)


def test_an_export_made_while_another_is_staged_never_mixes_with_it(models, tmp_path, monkeypatch):
    # Export A is paused once its SavedModel is staged; export B runs whole meanwhile. Both
    # overwrite (without it, the later is refused: tests/cli/test_cli_export.py).
    first, second = models
    path = tmp_path / "served"
    staged, resume = threading.Event(), threading.Event()
    save = tf.saved_model.save

    def pausing_save(*args, **kwargs):
        save(*args, **kwargs)
        if threading.current_thread().name == "A":
            staged.set()
            assert resume.wait(60)

    monkeypatch.setattr(tf.saved_model, "save", pausing_save)
    outcome = {}

    def export_a():
        try:
            outcome["a"] = export_model(first, path, k=2, overwrite=True, verbose=0)
        except Exception as error:  # noqa: BLE001 - recorded for the main thread
            outcome["a"] = error

    thread = threading.Thread(target=export_a, name="A")
    thread.start()
    try:
        assert staged.wait(60)
        export_model(second, path, k=3, overwrite=True, verbose=0)
        assert_export_of(path, second, 3)
    finally:
        resume.set()
        thread.join(60)
    assert not thread.is_alive()
    # Both land whole, the later switch last.
    assert not isinstance(outcome["a"], Exception), outcome["a"]
    assert_export_of(path, first, 2)
    assert [p.name for p in tmp_path.iterdir()] == ["served"]


def _wait(pid: int, seconds: float = 60) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the child did not exit")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_kill_between_the_renames_is_undone_by_the_next_export(models, tmp_path):
    first, second = models
    path, other = tmp_path / "served", tmp_path / "other"
    export_model(first, path, k=2, verbose=0)
    export_model(second, other, k=3, verbose=0)
    pid = os.fork()
    if pid == 0:  # The child stages `other` and is killed once `path` is renamed away.
        code = 1
        try:
            staged = destination.staging_dir(path)
            shutil.copytree(other, staged, dirs_exist_ok=True)
            rename = os.rename

            def killed_at_the_second_rename(source, target):
                if Path(target) == path:
                    os._exit(7)
                rename(source, target)

            os.rename = killed_at_the_second_rename
            destination.switch_in(staged, path, overwrite=True)
        finally:
            os._exit(code)
    assert _wait(pid) == 7
    assert not path.exists() and _atomic.backup_path(path).is_dir()
    # The next plain export puts the old one back and is refused, as for any existing OUT.
    with pytest.raises(FileExistsError, match="exists; nothing was written"):
        export_model(second, path, k=3, verbose=0)
    assert_export_of(path, first, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "served"]
    export_model(second, path, k=3, overwrite=True, verbose=0)
    assert_export_of(path, second, 3)


def test_an_error_between_the_renames_leaves_the_old_export(models, tmp_path, monkeypatch):
    first, second = models
    path = tmp_path / "served"
    export_model(first, path, k=2, verbose=0)
    rename = os.rename

    def failing(source, target):
        # The new export's rename fails; the old one's, back in place, does not.
        if Path(target) == path and Path(source) != _atomic.backup_path(path):
            raise OSError("disk gone")
        rename(source, target)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError, match="disk gone"):
        export_model(second, path, k=3, overwrite=True, verbose=0)
    monkeypatch.undo()
    assert_export_of(path, first, 2)
    assert [p.name for p in tmp_path.iterdir()] == ["served"]


def test_a_symbolic_link_is_refused_and_left_as_it_is(models, tmp_path):
    first, second = models
    real, link = tmp_path / "real", tmp_path / "link"
    export_model(first, real, k=2, verbose=0)
    link.symlink_to(real)
    for overwrite in (True, False, True):
        with pytest.raises(FileExistsError, match="is a symbolic link") as error:
            export_model(second, link, k=3, overwrite=overwrite, verbose=0)
        assert str(real) in str(error.value)
    assert link.is_symlink() and link.resolve() == real
    assert_export_of(real, first, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]


def test_overwrite_replaces_only_an_export_this_package_wrote(models, tmp_path):
    first, second = models
    # A SavedModel of someone else's, with a file beside it.
    foreign = tmp_path / "foreign"
    module = tf.Module()
    module.v = tf.Variable(1.0)
    tf.saved_model.save(module, str(foreign))
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an export tensorflow_similarity wrote"):
        export_model(first, foreign, overwrite=True, verbose=0)
    assert (foreign / "notes.txt").read_text() == "mine"
    assert tf.saved_model.load(str(foreign)).v.numpy() == 1.0
    # An export with the user's file beside it.
    path = tmp_path / "served"
    export_model(first, path, k=2, verbose=0)
    (path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"files its export did not write \(notes.txt\)"):
        export_model(second, path, k=3, overwrite=True, verbose=0)
    assert (path / "notes.txt").read_text() == "mine"
    (path / "notes.txt").unlink()
    export_model(second, path, k=3, overwrite=True, verbose=0)
    assert_export_of(path, second, 3)
    manifest = json.loads((path / "serving.json").read_text())
    assert manifest["written_by"] == destination.WRITTEN_BY
    assert set(manifest["files"]) == {p.name for p in path.iterdir()}
