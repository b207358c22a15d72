"""`Indexer.batch_add` of a stream of batches: every backend, all or nothing, clear errors."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.search import FaissOnDiskSearch, FaissSearch, LinearSearch
from tensorflow_similarity.stores import MemmapStore
from tests.search.references import knn_loop

DIM = 4
BACKENDS = ["linear-memory", "linear-memmap", "faiss", "faiss_ondisk", "milvus"]
_COLLECTIONS = itertools.count()


@pytest.fixture(scope="module")
def milvus_uri(tmp_path_factory):
    """One Milvus Lite database for the module; each index gets its own collection."""
    return str(tmp_path_factory.mktemp("milvus") / "stream.db")


def _index(backend, tmp_path, request):
    if backend == "linear-memory":
        return Indexer(DIM, "l2", search=LinearSearch("l2", DIM))
    if backend == "linear-memmap":
        return Indexer(DIM, "l2", kv_store=MemmapStore(tmp_path / "store"))
    pytest.importorskip("faiss")
    if backend == "faiss":
        return Indexer(DIM, "l2", search=FaissSearch("l2", DIM, algo="flat"))
    if backend == "faiss_ondisk":
        # nprobe == nlist: exact; trained on the first 8 rows, in the middle of the stream.
        search = FaissOnDiskSearch("l2", DIM, nlist=2, nprobe=2, train_size=8)
        return Indexer(DIM, "l2", search=search, kv_store=MemmapStore(tmp_path / "store"))
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from tensorflow_similarity.search import MilvusSearch

    uri = request.getfixturevalue("milvus_uri")
    search = MilvusSearch("l2", DIM, uri=uri, collection=f"s{next(_COLLECTIONS)}")
    return Indexer(DIM, "l2", search=search)


def _rows(count, seed=0):
    return np.random.default_rng(seed).normal(size=(count, DIM)).astype(np.float32)


def _batches(rows, labels, data, size=5):
    for start in range(0, len(rows), size):
        stop = start + size
        yield rows[start:stop], labels[start:stop], data[start:stop]


def _state(index):
    queries = _rows(3, seed=9)
    lookups = index.batch_lookup(queries, k=min(4, index.size()), verbose=0)
    rows = [[(n.id, n.label, round(n.distance, 5)) for n in row] for row in lookups]
    return index.size(), sorted(index.ids().tolist()), rows


@pytest.mark.parametrize(
    "backend, kind",
    # How elements are read does not depend on the backend: datasets on two of them.
    [(backend, "generator") for backend in BACKENDS]
    + [("linear-memory", "dataset"), ("faiss_ondisk", "dataset")],
)
def test_a_stream_indexes_what_exact_search_finds(tmp_path, request, backend, kind):
    rows, labels, data = _rows(23), np.arange(23) % 3, np.arange(100, 123)
    if kind == "dataset":
        stream = tf.data.Dataset.from_tensor_slices((rows, labels, data)).batch(5)
    else:
        stream = _batches(rows, labels, data)
    index = _index(backend, tmp_path, request)
    index.batch_add(stream)
    assert index.size() == 23 and sorted(index.ids().tolist()) == list(range(23))
    queries = _rows(4, seed=1)
    want_ids, want_distances = knn_loop("euclidean", queries, rows, np.arange(23), 6)
    for lookups, ids, distances in zip(
        index.batch_lookup(queries, k=6, verbose=0), want_ids, want_distances, strict=True
    ):
        assert [n.id for n in lookups] == ids.tolist()
        np.testing.assert_allclose([n.distance for n in lookups], distances, rtol=1e-5, atol=1e-5)
        assert [n.label for n in lookups] == [int(labels[i]) for i in ids]
        assert [int(n.data) for n in lookups] == [int(data[i]) for i in ids]
        for n in lookups:
            np.testing.assert_array_equal(n.embedding, rows[n.id])


def _bad_dimension(rows):
    yield rows[:5], np.zeros(5, np.int64)
    yield rows[5:10], np.ones(5, np.int64)
    yield np.ones((3, DIM + 1), np.float32), np.ones(3, np.int64)


def _missing_labels(rows):
    yield rows[:5], np.zeros(5, np.int64)
    yield (rows[5:10],)


def _raising(rows):
    yield rows[:5], np.zeros(5, np.int64)
    yield rows[5:10], np.ones(5, np.int64)
    raise RuntimeError("the data source failed")


_FAILURES = {
    "bad dimension": (_bad_dimension, ValueError, r"Batch 2 of the stream was refused: .*\[n, 4\]"),
    "missing labels": (_missing_labels, ValueError, "Batch 1 .* refused: it has no labels"),
    "stream raises": (_raising, RuntimeError, "the data source failed"),
}


@pytest.mark.parametrize(
    "backend, failure",
    # The undo does not depend on why the stream failed: every backend for one reason.
    [(backend, "bad dimension") for backend in BACKENDS]
    + [
        (backend, failure)
        for backend in ("linear-memory", "faiss_ondisk")
        for failure in ("missing labels", "stream raises")
    ],
)
def test_a_failed_stream_leaves_the_index_as_before(tmp_path, request, backend, failure):
    stream, error, message = _FAILURES[failure]
    index = _index(backend, tmp_path, request)
    index.batch_add(_rows(12, seed=2), labels=np.arange(12) % 2, verbose=0)
    index.remove([3])
    before = _state(index)
    with pytest.raises(error, match=message) as raised:
        index.batch_add(stream(_rows(10, seed=3)))
    assert "were removed again" in " ".join(raised.value.__notes__)
    assert _state(index) == before
    # The id counter went back too: the next item gets the id the failed add gave first.
    index.batch_add(_rows(1, seed=4), labels=[1], verbose=0)
    assert sorted(index.ids().tolist())[-1] == 12


@pytest.mark.parametrize("backend", ["linear-memory", "linear-memmap", "faiss"])
def test_a_search_that_fails_mid_stream_is_undone_with_the_store(
    tmp_path, request, backend, monkeypatch
):
    index = _index(backend, tmp_path, request)
    index.batch_add(_rows(6, seed=7), labels=np.zeros(6, np.int64), verbose=0)
    index.remove([1])
    before = _state(index)
    calls = []

    def failing(*args, **kwargs):
        calls.append(len(args[0]))
        if len(calls) == 2:  # the store took this batch, the search refuses it
            raise MemoryError("the search ran out of memory")
        return search_add(*args, **kwargs)

    search_add = index.search.batch_add
    monkeypatch.setattr(index.search, "batch_add", failing)
    with pytest.raises(MemoryError):
        index.batch_add(iter([(_rows(3, seed=8), [1, 1, 1]), (_rows(4, seed=9), [2] * 4)]))
    monkeypatch.undo()
    assert _state(index) == before
    # Store and search still agree row for row: a new item is found with its own embedding.
    new = _rows(1, seed=10)
    index.batch_add(new, labels=[5], verbose=0)
    nearest = index.single_lookup(new[0], k=1)[0]
    assert (nearest.id, nearest.label) == (6, 5)
    np.testing.assert_array_equal(nearest.embedding, new[0])


def test_refusals_before_any_work():
    index = Indexer(DIM, "l2")
    with pytest.raises(ValueError, match="empty stream: it yielded no batches"):
        index.batch_add(iter([]))
    with pytest.raises(ValueError, match="empty stream"):
        index.batch_add(tf.data.Dataset.from_tensor_slices(np.zeros((0, DIM), np.float32)))
    with pytest.raises(ValueError, match="go inside a stream's elements"):
        index.batch_add(iter([_rows(2)]), labels=[0, 1])
    with pytest.raises(ValueError, match=r"Batch 0 of the stream was refused: it is a dict"):
        index.batch_add(iter([{"x": _rows(2), "y": [0, 1]}]))
    with pytest.raises(ValueError, match="Batch 0 .* a tuple of 4 items"):
        index.batch_add(iter([(_rows(2), [0, 1], [0, 1], [0, 1])]))
    with pytest.raises(ValueError, match="Batch 0 .*2 labels|Batch 0 .*shape \\(2,\\)"):
        index.batch_add(iter([(_rows(3), [0, 1])]))
    assert index.size() == 0


def test_bare_batches_and_one_tuples_are_embeddings_alone():
    index = Indexer(DIM, "l2")
    rows = _rows(6)
    index.batch_add(iter([rows[:2], (rows[2:6],)]))
    assert index.size() == 6
    assert index.single_lookup(rows[4], k=1)[0].id == 4
    assert index.single_lookup(rows[4], k=1)[0].label is None


def _die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def _killed_stream(rows):
    yield rows[:6], np.zeros(6, np.int64)
    yield rows[6:12], np.ones(6, np.int64)
    _die()


def _add_killed(path, rows):
    """Loads the index in `path`, streams into it until killed, then would save it."""
    if "faiss" in sys.modules:
        # The parent's OpenMP threads are not in the forked child: faiss runs on this one.
        sys.modules["faiss"].omp_set_num_threads(1)
    index = Indexer.load(path, verbose=0)
    index.batch_add(_killed_stream(rows))
    index.save(path)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
@pytest.mark.parametrize("backend", ["linear-memmap", "faiss_ondisk"])
def test_a_kill_during_a_streaming_add_leaves_the_saved_index(tmp_path, request, backend):
    path = tmp_path / "index"
    index = _index(backend, tmp_path, request)
    index.batch_add(_rows(10, seed=5), labels=np.arange(10) % 3, verbose=0)
    index.remove([2])
    index.save(path)
    before = _state(Indexer.load(path, verbose=0))
    # Forked: TensorFlow is not used in the child.
    pid = os.fork()
    if pid == 0:
        try:
            _add_killed(path, _rows(12, seed=6))
        finally:
            os._exit(1)  # reached only if the stream did not kill the child
    deadline = time.monotonic() + 60
    while not (done := os.waitpid(pid, os.WNOHANG))[0]:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the streaming child did not finish in 60 s")
        time.sleep(0.05)
    assert os.WIFSIGNALED(done[1]) and os.WTERMSIG(done[1]) == signal.SIGKILL, done
    assert _state(Indexer.load(path, verbose=0)) == before
