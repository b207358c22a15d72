"""A kill -9 during `remove`, `upsert`, `compact` or a Milvus add leaves the saved index as it was.

A Milvus collection is shared by processes as a server's is: a forked child
talks to the Milvus Lite server of the test's process, so killing it kills
a writer, not the database.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time

import numpy as np
import pytest

from tensorflow_similarity import _atomic
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.search import MilvusSearch
from tensorflow_similarity.stores import MemmapStore, MemoryStore
from tests.search.references import knn_loop

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")

DIM = 4
# The streaming add of the Milvus test: 3 batches of 3 rows, killed after the second.
STREAM = np.random.default_rng(1).normal(size=(3, 3, DIM)).astype(np.float32)


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
    elif op == "compact":
        # Killed inside compact, once the kept rows are written beside the saved store.
        MemmapStore._write_meta = _die
        index.compact()
    else:
        # Killed once the second batch of a streaming add is in the collection.
        write, writes = MilvusSearch._write, itertools.count(1)

        def write_then_die(self, *args):
            write(self, *args)
            if next(writes) == 2:
                _die()

        MilvusSearch._write = write_then_die
        index.batch_add(((x, np.full(len(x), 7)) for x in STREAM), verbose=0)
    index.save(path)


def _run_killed(path, op):
    """Runs `_update_and_save` in a forked child (TensorFlow is not used there); waits 60 s."""
    pid = os.fork()
    if pid == 0:
        try:
            _update_and_save(path, op)
        finally:
            os._exit(1)  # reached only if no hook killed the child
    status = _wait(pid, op)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def _wait(pid, what):
    """The exit status of the child `pid`, killed if it runs for more than 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"the {what} child did not finish in 60 s")
    return status


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


def _milvus_index(tmp_path, rows):
    """A Milvus Lite index of `rows` (labels 0, 1, 2, ...), saved in `tmp_path / "index"`."""
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    uri = str(tmp_path / "index.db")
    index = Indexer(embedding_size=DIM, distance="l2", search=MilvusSearch("l2", DIM, uri=uri))
    index.batch_add(rows, labels=np.arange(len(rows)) % 3, verbose=0)
    index.save(tmp_path / "index")
    return index, uri


def _exact(index, keys, ids):
    """The index's ids and distances of 4 queries, and those of a NumPy search over `keys`."""
    queries = np.random.default_rng(9).normal(size=(4, DIM)).astype(np.float32)
    found = index.batch_lookup(queries, k=len(keys), verbose=0)
    got = ([[n.id for n in row] for row in found], [[n.distance for n in row] for row in found])
    return got, knn_loop("euclidean", queries, keys, ids, len(keys))


def _assert_exact(index, keys, ids):
    (got_ids, got_distances), (want_ids, want_distances) = _exact(index, keys, ids)
    np.testing.assert_array_equal(got_ids, want_ids)
    np.testing.assert_allclose(got_distances, want_distances, rtol=1e-5, atol=1e-5)


def test_a_kill_during_a_milvus_streaming_add_leaves_the_saved_state(tmp_path):
    rows = np.random.default_rng(0).normal(size=(20, DIM)).astype(np.float32)
    _, uri = _milvus_index(tmp_path, rows)
    path = tmp_path / "index"
    _run_killed(path, "milvus_add")
    # The killed add left its first two batches in the collection...
    every_row = MilvusSearch("l2", DIM, uri=uri, collection="tfsim_index")
    assert every_row.size() == 26
    # ... and the save loads as it was saved, unaware of them.
    loaded = Indexer.load(path, verbose=0)
    np.testing.assert_array_equal(loaded.search.ids(), np.arange(20))
    _assert_exact(loaded, rows, np.arange(20))
    # The next add deletes them first, and gives their ids again.
    with pytest.warns(UserWarning, match="deleted 6 rows with ids above 19"):
        loaded.batch_add(STREAM[2], labels=[7, 7, 7], verbose=0)
    keys = np.concatenate([rows, STREAM[2]])
    np.testing.assert_array_equal(loaded.search.ids(), np.arange(23))
    _assert_exact(loaded, keys, np.arange(23))
    assert every_row.size() == 23
    loaded.save(path)
    _assert_exact(Indexer.load(path, verbose=0), keys, np.arange(23))


def test_a_process_loading_a_milvus_save_sees_only_the_saved_rows(tmp_path):
    rows = np.random.default_rng(2).normal(size=(20, DIM)).astype(np.float32)
    writer, _ = _milvus_index(tmp_path, rows)
    more = np.random.default_rng(3).normal(size=(5, DIM)).astype(np.float32)
    writer.batch_add(more, labels=[7] * 5, verbose=0)  # not saved
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            reader = Indexer.load(tmp_path / "index", verbose=0)
            (ids, distances), _ = _exact(reader, rows, np.arange(20))
            result = {"ids": reader.search.ids().tolist(), "lookup": [ids, distances]}
            os.write(write, json.dumps(result).encode())
        finally:
            os._exit(0)
    os.close(write)
    status = _wait(pid, "reader")  # its few kilobytes fit the pipe's buffer
    with os.fdopen(read, "rb") as pipe:
        result = json.loads(pipe.read() or b"null")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    assert result is not None, "the reader child failed (its error is on stderr)"
    assert result["ids"] == list(range(20))
    _, (want_ids, want_distances) = _exact(writer, rows, np.arange(20))
    np.testing.assert_array_equal(result["lookup"][0], want_ids)
    np.testing.assert_allclose(result["lookup"][1], want_distances, rtol=1e-5, atol=1e-5)
    # The writer sees its own add.
    np.testing.assert_array_equal(writer.search.ids(), np.arange(25))
