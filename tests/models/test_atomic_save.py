"""`SimilarityModel.save` of a model and its index is all or nothing, and the pair is checked."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import keras
import numpy as np
import pytest

from tensorflow_similarity import _atomic
from tensorflow_similarity.models import SimilarityModel

ROWS, DIM = 1000, 8
LEFTOVERS = (".model.partial.keras", ".model.index.partial", ".model.index.old")


def _examples(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(ROWS, DIM)).astype(np.float32)


def _model(seed: int) -> SimilarityModel:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((DIM,))
    model = SimilarityModel(inputs, keras.layers.Dense(DIM)(inputs))
    model.compile(keras.optimizers.Adam(), loss="mse", distance="cosine")
    model.index(_examples(seed), np.arange(ROWS), verbose=0)
    return model


def _self_match(path: Path, seed: int) -> float:
    """The fraction of the first 50 indexed examples of `seed` that find themselves first."""
    model = keras.saving.load_model(path)
    model.load_index(path)
    found = model.lookup(_examples(seed)[:50], k=1, verbose=0)
    return float(np.mean([row[0].label == i for i, row in enumerate(found)]))


# The subprocess builds its model, says it is ready, saves when told and says how long it took.
SAVER = textwrap.dedent(
    f"""
    import sys, time
    sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
    from tests.models.test_atomic_save import _model
    model = _model(int(sys.argv[2]))
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    model.save(sys.argv[1])
    print("saved", time.perf_counter() - start, flush=True)
    """
)


def _start_saver(path: Path, seed: int) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", SAVER, str(path), str(seed)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "ready"
    return process


@pytest.mark.slow
def test_a_save_killed_at_any_point_leaves_the_old_pair_or_the_new_one(tmp_path):
    path = tmp_path / "model.keras"
    _model(0).save(path)
    # The duration of one save over a good one, to kill the saves at fractions of it.
    scratch = tmp_path / "scratch" / "model.keras"
    scratch.parent.mkdir()
    new = _model(1)
    new.save(scratch)
    start = time.perf_counter()
    new.save(scratch)
    duration = time.perf_counter() - start
    assert _self_match(path, 0) == 1.0
    outcomes = []
    for fraction in (0.1, 0.5, 0.9):
        process = _start_saver(path, seed=1)
        try:
            process.stdin.write("\n")
            process.stdin.flush()
            time.sleep(fraction * duration)
            process.send_signal(signal.SIGKILL)
        finally:
            process.kill()
            process.wait(timeout=60)
        old, new = _self_match(path, 0), _self_match(path, 1)
        # One whole pair: every indexed example of it finds itself.
        assert (old, new).count(1.0) == 1, (fraction, old, new)
        outcomes.append("new" if new == 1.0 else "old")
        # The next save tidies up what the kill left.
        _model(0).save(path)
        assert [n for n in LEFTOVERS if (tmp_path / n).exists()] == []
    assert _self_match(path, 0) == 1.0


def _failing_fsync(monkeypatch, fail_at: int) -> list[int]:
    calls = [0]
    fsync = _atomic.fsync_file

    def fsync_or_full(path):
        calls[0] += 1
        if calls[0] == fail_at:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        fsync(path)

    monkeypatch.setattr(_atomic, "fsync_file", fsync_or_full)
    return calls


def test_a_full_disk_at_any_write_of_a_save_keeps_the_old_pair(tmp_path, monkeypatch):
    path = tmp_path / "model.keras"
    _model(0).save(path)
    new = _model(1)
    with monkeypatch.context() as patch:
        writes = _failing_fsync(patch, fail_at=0)
        new.save(tmp_path / "count.keras")
    assert writes[0] >= 3
    for fail_at in range(1, writes[0] + 1):
        with monkeypatch.context() as patch:
            _failing_fsync(patch, fail_at)
            with pytest.raises(OSError, match="MiB free on that disk.*previous save"):
                new.save(path)
        assert [n for n in LEFTOVERS if (tmp_path / n).exists()] == [], fail_at
        assert _self_match(path, 0) == 1.0, fail_at
    new.save(path)
    assert _self_match(path, 1) == 1.0


def test_an_index_beside_another_model_file_is_refused(tmp_path):
    _model(0).save(tmp_path / "model.keras")
    _model(1).save(tmp_path / "other.keras")
    # A full disk between the two files of 0.17's save left such a pair.
    (tmp_path / "other.keras").replace(tmp_path / "model.keras")
    model = keras.saving.load_model(tmp_path / "model.keras")
    with pytest.raises(ValueError, match="saved with another model.keras"):
        model.load_index(tmp_path / "model.keras")
    assert model._ix is None or model.index_size() == 0


def test_an_index_saved_with_other_weights_is_refused(tmp_path):
    _model(0).save(tmp_path / "model.keras")
    other = _model(1)
    with pytest.raises(ValueError, match="other weights"):
        other.load_index(tmp_path / "model.keras")
    # Its own index is kept.
    assert other.index_size() == ROWS


def test_a_save_killed_between_its_renames_loads_the_pair_of_the_model_file(tmp_path):
    path = tmp_path / "model.keras"
    _model(0).save(path)
    new = _model(1)
    # Stop the save just after the index is switched in, before the model file is.
    with pytest.MonkeyPatch.context() as patch:
        replace = _atomic.replace_file

        def stop(source, destination):
            if Path(destination) == path:
                raise KeyboardInterrupt
            replace(source, destination)

        patch.setattr(_atomic, "replace_file", stop)
        with pytest.raises(KeyboardInterrupt):
            new.save(path)
    assert (tmp_path / ".model.index.old").is_dir()
    assert _self_match(path, 0) == 1.0
    # The next save rolls the interrupted one forward, then saves.
    _model(0).save(path)
    assert _self_match(path, 0) == 1.0
    assert [n for n in LEFTOVERS if (tmp_path / n).exists()] == []
