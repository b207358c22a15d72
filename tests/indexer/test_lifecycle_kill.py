"""A kill -9 during `remove`, `upsert` or `compact` leaves the saved index as it was."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from tensorflow_similarity import _atomic
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.stores import MemmapStore, MemoryStore

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")

DIM = 4


def _die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def _update_and_save(path, op):
    """Loads the index in `path`, runs `op` with a hook that kills the process, saves."""
    index = Indexer.load(path, verbose=0)
    if op == "remove":
        # Killed once the store has written its files into the new save.
        save = MemoryStore._save
        MemoryStore._save = lambda self, *args: (save(self, *args), _die())
        index.remove([1, 2, 3])
    elif op == "upsert":
        # Killed between the renames that switch the new save in.
        def switch(staged, destination):
            _atomic.fsync_tree(staged)
            os.rename(destination, _atomic.backup_path(destination))
            _die()

        _atomic.switch_dir = switch
        index.upsert([0, 99], np.full((2, DIM), 3.0, np.float32), labels=[5, 5])
    else:
        # Killed inside compact, once the kept rows are written beside the saved store.
        MemmapStore._write_meta = _die
        index.compact()
    index.save(path)


def _run_killed(path, op):
    """Runs `_update_and_save` in a forked child (TensorFlow is not used there); waits 60 s."""
    pid = os.fork()
    if pid == 0:
        try:
            _update_and_save(path, op)
        finally:
            os._exit(1)  # reached only if no hook killed the child
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the {op} child did not finish in 60 s")
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def _state(path):
    index = Indexer.load(path, verbose=0)
    queries = np.random.default_rng(9).normal(size=(4, DIM)).astype(np.float32)
    lookups = index.batch_lookup(queries, k=5, verbose=0)
    return index.ids().tolist(), [[(n.id, n.label, n.distance) for n in row] for row in lookups]


@pytest.mark.parametrize("op", ["remove", "upsert", "compact"])
def test_a_kill_during_an_update_leaves_the_state_before_it(tmp_path, op):
    path = tmp_path / "index"
    kv_store = MemmapStore(tmp_path / "live") if op == "compact" else "memory"
    index = Indexer(embedding_size=DIM, distance="l2", kv_store=kv_store)
    rows = np.random.default_rng(0).normal(size=(20, DIM)).astype(np.float32)
    index.batch_add(rows, labels=np.arange(20) % 3, verbose=0)
    index.remove([4, 5])  # tombstones, which compact would drop
    index.save(path)
    before = _state(path)
    _run_killed(path, op)
    assert _state(path) == before
    assert Indexer.read_metadata(path)["size"] == 18
