"""MemoryStore: records in and out, save/load with a format version, errors before any work."""

from __future__ import annotations

import mmap
import sys

import keras
import numpy as np
import pytest

from tensorflow_similarity.stores import MemoryStore
from tensorflow_similarity.stores.npz import write_npz


def _filled():
    store = MemoryStore()
    rng = np.random.default_rng(0)
    embeddings = rng.normal(size=(5, 3)).astype(np.float32)
    images = rng.integers(0, 255, size=(5, 2, 2)).astype(np.uint8)
    assert store.batch_add(embeddings, labels=[4, 1, 4, 0, 2], data=images) == [0, 1, 2, 3, 4]
    return store, embeddings, images


def test_records_come_back_as_added():
    store, embeddings, images = _filled()
    assert store.add(np.ones(3), label=None, data="text") == 5
    assert store.size() == len(store) == 6
    got_embeddings, labels, data = store.batch_get([5, 2, 0])
    np.testing.assert_array_equal(
        got_embeddings, np.stack([np.ones(3), embeddings[2], embeddings[0]])
    )
    assert labels == [None, 4, 4]
    assert data[0] == "text"
    np.testing.assert_array_equal(data[1], images[2])
    embedding, label, item = store.get(3)
    np.testing.assert_array_equal(embedding, embeddings[3])
    assert label == 0 and isinstance(label, int)
    np.testing.assert_array_equal(item, images[3])


def test_no_labels_and_no_data():
    store = MemoryStore()
    store.batch_add(np.zeros((2, 4)))
    assert store.batch_get([0, 1])[1:] == ([None, None], [None, None])


ROUND_TRIP_DATA = {
    "array": np.arange(8).reshape(4, 2),
    "strings": ["a", "bcd", "", "é"],
    "ragged": [np.ones((2, 3)), np.arange(4.0).reshape(4, 1), np.zeros((0, 2)), np.ones((1, 1))],
    "ragged strings": [np.array(["a", "bc"]), np.array(["d"]), np.array([], str), np.array(["e"])],
    "object": ["a", {"b": 1}, None, np.ones(3)],
    "none": None,
}


@pytest.mark.parametrize("data_kind", list(ROUND_TRIP_DATA))
def test_save_load_round_trip(tmp_path, data_kind):
    store = MemoryStore()
    embeddings = np.arange(12, dtype=np.float32).reshape(4, 3)
    data = ROUND_TRIP_DATA[data_kind]
    store.batch_add(embeddings, labels=[1, None, 3, 4], data=data)
    if data_kind == "object":
        with pytest.warns(UserWarning, match="safe_mode=False"):
            store.save(tmp_path)
    else:
        store.save(tmp_path, compression=data_kind != "none")
    if data_kind != "object":  # every array of the file reads without pickle
        with np.load(tmp_path / "memory_store.npz", allow_pickle=False) as npz:
            assert all(not npz[key].dtype.hasobject for key in npz.files)
    loaded = MemoryStore()
    loaded.add(np.ones(7), 9)  # replaced, not appended to
    assert loaded.load(tmp_path, safe_mode=data_kind != "object") == 4
    got, labels, got_data = loaded.batch_get([0, 1, 2, 3])
    np.testing.assert_array_equal(got, embeddings)
    assert labels == [1, None, 3, 4]
    want = [None] * 4 if data is None else list(data)
    for a, b in zip(got_data, want, strict=True):
        if isinstance(b, np.ndarray):
            np.testing.assert_array_equal(a, b)
        else:
            assert a == b
    assert loaded.add(np.zeros(3)) == 4


class _Payload:
    """Pickles as a call of `open(marker, "w")`: unpickling it creates the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def write_poisoned_store(folder, marker, data_kind="object"):
    """Writes a valid-looking memory_store.npz whose data array unpickles into a call."""
    data = np.empty(2, dtype=object)
    data[0], data[1] = _Payload(marker), "b"
    write_npz(
        folder / "memory_store.npz",
        {
            "embeddings": np.ones((2, 3), np.float32),
            "labels": np.array([0, 1]),
            "has_label": np.array([True, True]),
            "data_kind": np.array(data_kind),
            "data": data,
        },
        kind="MemoryStore",
        format_version=1,
    )


@pytest.mark.parametrize("data_kind", ["object", "array", "none"])
def test_pickled_data_are_refused_in_safe_mode_and_never_unpickled(tmp_path, data_kind):
    marker = tmp_path / "payload-ran"
    write_poisoned_store(tmp_path, marker, data_kind)
    target = MemoryStore()
    target.batch_add(np.ones((1, 6)), labels=[7])
    with pytest.raises(ValueError, match=r"Python objects .*'data'.*safe_mode=False"):
        target.load(tmp_path)
    assert not marker.exists()
    assert target.size() == 1 and target.batch_get([0])[1] == [7]
    # The explicit opt-in unpickles, as Keras' safe_mode=False does: the payload runs.
    if data_kind == "object":
        assert target.load(tmp_path, safe_mode=False) == 2
        assert marker.exists()


def test_load_refuses_corrupt_and_other_versions_and_changes_nothing(tmp_path):
    store, embeddings, _ = _filled()
    store.save(tmp_path / "good")
    content = (tmp_path / "good" / "memory_store.npz").read_bytes()
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "memory_store.npz").write_bytes(content[: len(content) // 2])
    write_npz(
        tmp_path / "v99" / "memory_store.npz",
        {"embeddings": np.zeros((1, 3))},
        kind="MemoryStore",
        format_version=99,
    )
    target = MemoryStore()
    target.batch_add(np.ones((2, 6)), labels=[7, 8])
    with pytest.raises(ValueError, match="corrupt"):
        target.load(tmp_path / "corrupt")
    with pytest.raises(ValueError, match="format version 99"):
        target.load(tmp_path / "v99")
    with pytest.raises(FileNotFoundError):
        target.load(tmp_path / "missing")
    assert target.size() == 2 and target.batch_get([0, 1])[1] == [7, 8]


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda s: s.batch_add(np.ones((2, 4))), ValueError, r"\[n, 3\]"),
        (lambda s: s.batch_add(np.ones((2, 3)), labels=[1]), ValueError, "one label per"),
        (lambda s: s.batch_add(np.ones((2, 3)), labels=[1, "cat"]), ValueError, "integers"),
        (lambda s: s.batch_add(np.ones((2, 3)), data=[1, 2, 3]), ValueError, "one item per"),
        (lambda s: s.batch_add(np.full((1, 3), np.inf)), ValueError, "NaN"),
        (lambda s: s.add(np.ones((1, 3))), ValueError, "batch_add"),
        (lambda s: s.get(5), IndexError, "no record 5"),
        (lambda s: s.batch_get([0, -1]), IndexError, "no record -1"),
    ],
)
def test_bad_input_is_refused_before_any_work(call, error, match):
    store, embeddings, _ = _filled()
    with pytest.raises(error, match=match):
        call(store)
    assert store.size() == 5
    np.testing.assert_array_equal(store.batch_get(range(5))[0], embeddings)


def test_reset_and_reuse_with_another_size():
    store, _, _ = _filled()
    store.reset()
    assert store.size() == 0 and store.dim is None
    assert store.batch_add(np.ones((1, 9))) == [0]


def test_to_data_frame():
    pytest.importorskip("pandas")
    store, embeddings, _ = _filled()
    frame = store.to_data_frame(num_records=2)
    assert list(frame.columns) == ["embeddings", "labels", "data"]
    assert len(frame) == 2 and frame["labels"].tolist() == [4, 1]
    np.testing.assert_array_equal(frame["embeddings"][1], embeddings[1])
    assert len(store.to_data_frame()) == 5


def test_to_data_frame_without_pandas_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)  # makes `import pandas` fail
    with pytest.raises(ImportError, match="pip install pandas"):
        _filled()[0].to_data_frame()


def test_keras_serialisation():
    store = MemoryStore(name="mine")
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(store))
    assert type(rebuilt) is MemoryStore and rebuilt.get_config() == {"name": "mine", "verbose": 0}


def test_load_refuses_nan_embeddings_and_changes_nothing(tmp_path):
    embeddings = np.ones((3, 2), np.float32)
    embeddings[1, 0] = np.nan
    write_npz(
        tmp_path / "memory_store.npz",
        {
            "embeddings": embeddings,
            "labels": np.array([0, 1, 2]),
            "has_label": np.ones(3, bool),
            "data_kind": np.array("none"),
            "data": np.zeros(0),
        },
        kind="MemoryStore",
        format_version=1,
    )
    target = MemoryStore()
    target.batch_add(np.ones((2, 6)), labels=[7, 8])
    with pytest.raises(ValueError, match="holds 1 embeddings with NaN or infinite .* row 1"):
        target.load(tmp_path)
    assert target.size() == 2 and target.batch_get([0, 1])[1] == [7, 8]
    assert target.saved_files(tmp_path) == {"memory_store.npz": None}


def test_embeddings_are_saved_raw_and_load_memory_mapped(tmp_path):
    store, embeddings, _ = _filled()
    store.save(tmp_path, compression=True)
    assert set(store.saved_files(tmp_path)) == {"memory_store.npz", "memory_store_embeddings.npy"}
    raw = np.load(tmp_path / "memory_store_embeddings.npy", allow_pickle=False)
    np.testing.assert_array_equal(raw, np.asarray(embeddings, np.float32))
    with np.load(tmp_path / "memory_store.npz") as npz:
        assert "embeddings" not in npz.files
    loaded = MemoryStore()
    loaded.load(tmp_path)
    assert _memory_mapped(loaded.embedding_rows())
    np.testing.assert_array_equal(loaded.embedding_rows(), raw)
    loaded.add(np.zeros(raw.shape[1]), label=1)  # copies into memory, the file is untouched
    np.testing.assert_array_equal(np.load(tmp_path / "memory_store_embeddings.npy"), raw)
    assert loaded.size() == len(raw) + 1


def _memory_mapped(array):
    """Whether `array` reads a memory-mapped file (through any chain of views)."""
    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        array = getattr(array, "base", None)
    return False
