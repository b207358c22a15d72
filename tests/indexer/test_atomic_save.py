"""`Indexer.save` replaces a saved folder whole or not at all."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from tensorflow_similarity import _atomic
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.stores import MemmapStore

ROWS, DIM = 1000, 8


def _index(seed: int, kv_store="memory") -> Indexer:
    index = Indexer(embedding_size=DIM, kv_store=kv_store)
    rows = np.random.default_rng(seed).normal(size=(ROWS, DIM)).astype(np.float32)
    index.batch_add(rows, labels=np.arange(ROWS) + seed * ROWS, verbose=0)
    return index


def _first_label(path) -> int:
    return Indexer.load(path, verbose=0).kv_store.get(0)[1]


def test_a_full_disk_at_any_write_keeps_the_old_index_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "index"
    _index(0).save(path)
    new = _index(1)
    calls = [0]
    fsync = _atomic.fsync_file

    def fsync_or_full(file):
        calls[0] += 1
        if calls[0] == fail_at:
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        fsync(file)

    monkeypatch.setattr(_atomic, "fsync_file", fsync_or_full)
    fail_at = 0
    new.save(tmp_path / "count")
    total = calls[0]
    assert total >= 3
    for fail_at in range(1, total + 1):
        calls[0] = 0
        with pytest.raises(OSError, match=r"index.*MiB free on that disk.*previous save"):
            new.save(path)
        assert sorted(os.listdir(tmp_path)) == ["count", "index"], fail_at
        assert _first_label(path) == 0, fail_at
    fail_at = 0
    new.save(path)
    assert _first_label(path) == ROWS


def test_a_save_killed_between_its_renames_loads_the_old_index(tmp_path):
    path = tmp_path / "index"
    _index(0).save(path)
    # What a kill after the first rename of a save leaves: only the backup.
    path.rename(_atomic.backup_path(path))
    assert _first_label(path) == 0
    assert Indexer.read_metadata(path)["size"] == ROWS
    _index(1).save(path)
    assert sorted(os.listdir(tmp_path)) == ["index"]
    assert _first_label(path) == ROWS


def test_a_partial_staging_folder_is_ignored_and_cleared(tmp_path):
    path = tmp_path / "index"
    _index(0).save(path)
    staged = _atomic.staging_path(path)
    staged.mkdir()
    (staged / "index_metadata.json").write_text("{")
    assert _first_label(path) == 0
    _index(1).save(path)
    assert sorted(os.listdir(tmp_path)) == ["index"]


def test_a_memmap_store_living_in_the_saved_folder_is_saved_again_whole(tmp_path):
    path = tmp_path / "index"
    _index(0, kv_store=MemmapStore(tmp_path / "store")).save(path)
    loaded = Indexer.load(path, verbose=0)
    loaded.batch_add(np.ones((3, DIM), np.float32), labels=[7, 7, 7], verbose=0)
    loaded.save(path)
    again = Indexer.load(path, verbose=0)
    assert again.size() == ROWS + 3
    assert again.kv_store.get(ROWS + 2)[1] == 7
