"""`Indexer.load(search_options=...)`: what a save does not record, such as a Milvus token."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.search import FaissOnDiskSearch

DIM = 4


@pytest.fixture(scope="module")
def saved_milvus_index(tmp_path_factory):
    """A Milvus Lite index saved in a folder, and its rows."""
    pytest.importorskip("pymilvus")
    pytest.importorskip("milvus_lite")
    from tensorflow_similarity.search import MilvusSearch

    folder = tmp_path_factory.mktemp("milvus_options")
    search = MilvusSearch("l2", DIM, uri=str(folder / "index.db"), collection="options")
    index = Indexer(DIM, "l2", search=search)
    rows = np.random.default_rng(0).normal(size=(6, DIM)).astype(np.float32)
    index.batch_add(rows, labels=[0, 1, 2, 0, 1, 2], verbose=0)
    index.save(folder / "index")
    return folder / "index", rows


def test_the_token_reaches_every_milvus_connection(saved_milvus_index, monkeypatch):
    import pymilvus

    path, rows = saved_milvus_index
    tokens = []

    class RecordingClient(pymilvus.MilvusClient):
        def __init__(self, *args, **kwargs):
            tokens.append(kwargs.get("token"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(pymilvus, "MilvusClient", RecordingClient)
    index = Indexer.load(path, verbose=0, search_options={"token": "root:Milvus"})
    assert tokens and set(tokens) == {"root:Milvus"}
    assert index.search.token == "root:Milvus"
    assert [n.id for n in index.single_lookup(rows[4], k=2)][0] == 4


@pytest.mark.parametrize(
    "options, message",
    [
        ({"uri": "/elsewhere/index.db"}, r"cannot change 'uri'.*takes .*\['token'\]"),
        ({"dim": 8}, "cannot change 'dim'"),
        ({"tokn": "x"}, r"'tokn', which is not an argument of MilvusSearch.*\['token'\]"),
        (["token"], "must be a dict of MilvusSearch arguments"),
    ],
)
def test_what_the_save_recorded_is_refused_before_connecting(
    saved_milvus_index, monkeypatch, options, message
):
    import pymilvus

    path, _ = saved_milvus_index

    def refuse(*args, **kwargs):
        raise AssertionError("connected before refusing search_options")

    monkeypatch.setattr(pymilvus, "MilvusClient", refuse)
    with pytest.raises(ValueError, match=message):
        Indexer.load(path, verbose=0, search_options=options)


def test_a_faiss_ondisk_index_works_in_the_given_directory(tmp_path):
    pytest.importorskip("faiss")
    search = FaissOnDiskSearch("l2", DIM, nlist=2, nprobe=2, train_size=4)
    index = Indexer(DIM, "l2", search=search)
    index.batch_add(np.eye(DIM, dtype=np.float32) * 3, verbose=0)
    index.save(tmp_path / "index")
    loaded = Indexer.load(
        tmp_path / "index", verbose=0, search_options={"directory": tmp_path / "work"}
    )
    assert loaded.search.directory == tmp_path / "work"
    loaded.batch_add(np.ones((1, DIM), np.float32), verbose=0)
    assert (tmp_path / "work" / "faiss_ondisk.ids").stat().st_size == 8 * 5
