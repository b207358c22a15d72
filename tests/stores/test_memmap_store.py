"""MemmapStore: records on disk, reopened, crash-safe appends, save/load, errors before work."""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest

from tensorflow_similarity.stores import MemmapStore, MemoryStore, memmap_store


def _records(seed=0, count=6):
    rng = np.random.default_rng(seed)
    embeddings = rng.normal(size=(count, 4)).astype(np.float32)
    labels = [int(v) for v in rng.integers(0, 5, count)]
    images = rng.integers(0, 255, size=(count, 3, 2)).astype(np.uint8)
    return embeddings, labels, images


def test_records_match_a_memory_store_and_survive_reopening(tmp_path):
    embeddings, labels, images = _records()
    labels[2] = None
    disk, memory = MemmapStore(tmp_path / "s"), MemoryStore()
    for store in (disk, memory):
        assert store.batch_add(embeddings[:4], labels[:4], images[:4]) == [0, 1, 2, 3]
        assert store.add(embeddings[4], labels[4], images[4]) == 4
        store.batch_add(embeddings[5:], labels[5:], images[5:])
    reopened = MemmapStore(tmp_path / "s")
    for store in (disk, reopened):
        got, want = store.batch_get([5, 2, 0]), memory.batch_get([5, 2, 0])
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1] == [labels[5], None, labels[0]]
        for a, b in zip(got[2], want[2], strict=True):
            np.testing.assert_array_equal(a, b)
    assert reopened.size() == 6 and reopened.dim == 4


def test_a_crashed_batch_is_invisible_and_cut_on_the_next_append(tmp_path):
    embeddings, labels, _ = _records()
    store = MemmapStore(tmp_path)
    store.batch_add(embeddings[:3], labels[:3])
    with open(tmp_path / "embeddings.bin", "ab") as handle:  # half a batch, no metadata
        handle.write(b"\x00" * 40)
    reopened = MemmapStore(tmp_path)
    assert reopened.size() == 3
    reopened.batch_add(embeddings[3:], labels[3:])
    np.testing.assert_array_equal(MemmapStore(tmp_path).batch_get(range(6))[0], embeddings)
    assert (tmp_path / "embeddings.bin").stat().st_size == 6 * 4 * 4


def test_save_then_load_into_another_store(tmp_path):
    embeddings, labels, images = _records()
    store = MemmapStore(tmp_path / "a")
    store.batch_add(embeddings, labels, images)
    store.save(tmp_path / "saved")
    other = MemmapStore(tmp_path / "b")
    other.batch_add(np.ones((2, 9)))
    assert other.load(tmp_path / "saved") == 6
    np.testing.assert_array_equal(other.batch_get([3])[2][0], images[3])
    other.batch_add(embeddings[:1], [1], images[:1])  # the copy is independent
    assert other.size() == 7 and MemmapStore(tmp_path / "saved").size() == 6


def test_corrupt_truncated_or_foreign_files_are_refused_and_change_nothing(tmp_path):
    embeddings, labels, _ = _records()
    MemmapStore(tmp_path / "good").batch_add(embeddings, labels)
    target = MemmapStore(tmp_path / "target")
    target.batch_add(np.ones((2, 3)), [7, 8])
    (tmp_path / "bad_json").mkdir()
    (tmp_path / "bad_json" / "memmap_store.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        target.load(tmp_path / "bad_json")
    MemmapStore(tmp_path / "short").batch_add(embeddings, labels)
    with open(tmp_path / "short" / "labels.bin", "r+b") as handle:
        handle.truncate(10)
    with pytest.raises(ValueError, match="truncated"):
        target.load(tmp_path / "short")
    meta = json.loads((tmp_path / "good" / "memmap_store.json").read_text())
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "memmap_store.json").write_text(json.dumps({**meta, "format_version": 2}))
    with pytest.raises(ValueError, match="format version 2"):
        target.load(tmp_path / "v2")
    with pytest.raises(FileNotFoundError):
        target.load(tmp_path / "nothing")
    assert target.size() == 2 and target.batch_get([0, 1])[1] == [7, 8]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s: s.batch_add(np.ones((1, 4))), "pass data for these records"),
        (lambda s: s.batch_add(np.ones((1, 4)), data=[np.ones((2, 2))]), r"shape \[3, 2\]"),
        (lambda s: s.batch_add(np.ones((1, 4)), data=[["a", "b"]]), "numeric"),
        (lambda s: s.batch_add(np.ones((2, 5)), data=np.ones((2, 3, 2))), r"\[n, 4\]"),
        (lambda s: s.batch_add(np.ones((2, 4)), labels=[1]), "one label per"),
    ],
)
def test_bad_input_is_refused_before_any_write(tmp_path, call, match):
    embeddings, labels, images = _records()
    store = MemmapStore(tmp_path)
    store.batch_add(embeddings, labels, images)
    sizes = {file.name: file.stat().st_size for file in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=match):
        call(store)
    assert {file.name: file.stat().st_size for file in tmp_path.iterdir()} == sizes
    assert store.size() == 6


def test_a_store_without_data_refuses_data_later(tmp_path):
    store = MemmapStore(tmp_path)
    store.batch_add(np.ones((2, 3)))
    with pytest.raises(ValueError, match="keeps none"):
        store.batch_add(np.ones((1, 3)), data=[np.ones(2)])
    store.reset()
    assert store.size() == 0 and store.dim is None
    store.batch_add(np.ones((1, 5)), data=[np.ones(2)])
    assert store.get(0)[2].tolist() == [1.0, 1.0]


def test_config_rebuilds_the_store_on_its_folder(tmp_path):
    store = MemmapStore(tmp_path)
    store.batch_add(np.ones((3, 2)), [1, 2, 3])
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(store))
    assert type(rebuilt) is MemmapStore and rebuilt.size() == 3
    assert rebuilt.get_config() == {"name": "memmap", "verbose": 0, "path": str(tmp_path)}


def test_saved_files_cover_the_records_and_not_the_bytes_past_them(tmp_path):
    embeddings, labels, images = _records()
    store = MemmapStore(tmp_path)
    assert store.saved_files(tmp_path) == {"memmap_store.json": None}
    store.batch_add(embeddings, labels, images)
    with open(tmp_path / "labels.bin", "ab") as handle:  # a crashed append's bytes
        handle.write(b"\x00" * 5)
    assert store.saved_files(tmp_path) == {
        "memmap_store.json": None,
        "embeddings.bin": 6 * 4 * 4,
        "labels.bin": 6 * 8,
        "has_label.bin": 6,
        "data.bin": 6 * 3 * 2,
    }


def test_load_refuses_nan_embeddings_and_changes_nothing(tmp_path):
    embeddings, labels, _ = _records()
    MemmapStore(tmp_path / "saved").batch_add(embeddings, labels)
    rows = np.memmap(tmp_path / "saved" / "embeddings.bin", np.float32, "r+", shape=(6, 4))
    rows[3, 1] = np.inf
    rows.flush()
    del rows
    target = MemmapStore(tmp_path / "target")
    target.batch_add(np.ones((2, 3)), [7, 8])
    with pytest.raises(ValueError, match="holds 1 embeddings with NaN or infinite .* row 3"):
        target.load(tmp_path / "saved")
    assert target.size() == 2 and MemmapStore(tmp_path / "target").batch_get([0, 1])[1] == [7, 8]
    in_place = MemmapStore(tmp_path / "saved")
    with pytest.raises(ValueError, match="NaN or infinite"):
        in_place.load(tmp_path / "saved")


@pytest.mark.parametrize("meta", [{"count": 2, "dim": None}, {"count": -1}, {"dim": "4"}])
def test_a_description_of_impossible_records_is_refused(tmp_path, meta):
    embeddings, labels, _ = _records()
    MemmapStore(tmp_path).batch_add(embeddings, labels)
    saved = json.loads((tmp_path / "memmap_store.json").read_text())
    (tmp_path / "memmap_store.json").write_text(json.dumps({**saved, **meta}))
    with pytest.raises(ValueError, match="which no store holds"):
        MemmapStore(tmp_path)


def test_a_store_opened_in_its_saved_folder_copies_it_before_a_change(tmp_path, monkeypatch):
    embeddings, labels, images = _records()
    MemmapStore(tmp_path / "live").batch_add(embeddings[:4], labels[:4], images[:4])
    MemmapStore(tmp_path / "live").save(tmp_path / "saved")
    saved = {f.name: f.read_bytes() for f in (tmp_path / "saved").iterdir()}
    store = MemmapStore(tmp_path / "saved")
    store.load(tmp_path / "saved")
    # A copy that fails (a full disk) changes nothing: the store still reads the saved folder.
    monkeypatch.setattr(
        memmap_store, "write_rows", lambda *a: (_ for _ in ()).throw(OSError(28, "full"))
    )
    with pytest.raises(OSError, match="Nothing was changed; free disk space"):
        store.add(embeddings[4], labels[4], images[4])
    assert store.path == tmp_path / "saved" and store.size() == 4
    monkeypatch.undo()
    store.add(embeddings[4], labels[4], images[4])
    assert store.path != tmp_path / "saved" and store.size() == 5
    np.testing.assert_array_equal(store.batch_get(range(5))[0], embeddings[:5])
    assert {f.name: f.read_bytes() for f in (tmp_path / "saved").iterdir()} == saved


@pytest.mark.parametrize("crash", ["before-description", "after-description"])
def test_keep_interrupted_by_a_crash_opens_as_before_or_after(tmp_path, monkeypatch, crash):
    store = MemmapStore(tmp_path)
    store.batch_add(np.arange(12.0).reshape(6, 2), labels=[0, 1, 2, 3, 4, 5])
    mask = np.array([1, 0, 1, 0, 0, 1], bool)
    # The crash: keep stops once its new column files (and, after, its description) exist.
    monkeypatch.setattr(memmap_store, "_finish_compaction", lambda path: None)
    if crash == "before-description":
        monkeypatch.setattr(memmap_store._atomic, "write_text", lambda *a: None)
    store.keep(mask)
    monkeypatch.undo()
    assert list(tmp_path.glob("*.bin.compact"))
    reopened = MemmapStore(tmp_path)
    want = [0, 2, 5] if crash == "after-description" else [0, 1, 2, 3, 4, 5]
    assert reopened.batch_get(list(range(len(want))))[1] == want
    np.testing.assert_array_equal(
        reopened.embedding_rows(), np.arange(12.0).reshape(6, 2)[want].astype(np.float32)
    )
    assert not list(tmp_path.glob("*.compact*"))


@pytest.mark.parametrize("pread", [True, False], ids=["pread", "no_pread"])
def test_batch_get_reads_repeated_unsorted_and_consecutive_ids(tmp_path, monkeypatch, pread):
    if not pread:
        # Windows' os has no pread: the store seeks and reads instead.
        monkeypatch.delattr(os, "pread", raising=False)
    embeddings, labels, images = _records(count=9)
    labels[4] = None
    disk, memory = MemmapStore(tmp_path), MemoryStore()
    for store in (disk, memory):
        store.batch_add(embeddings, labels, images)
    ids = [8, 3, 3, 0, 1, 2, 4, 7, 6, 0]
    got, want = disk.batch_get(ids), memory.batch_get(ids)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1] == want[1]
    np.testing.assert_array_equal(np.stack(got[2]), np.stack(want[2]))
    assert disk.batch_get([])[0].shape == (0, 4)


def _resident_file_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssFile:"):
                return int(line.split()[1]) * 1024
    pytest.skip("RssFile is not reported (Linux only)")


def test_batch_get_leaves_no_page_of_the_files_resident(tmp_path):
    # 20,000 rows of 128 floats (10 MB) read at 500 random ids: a read through a memory map
    # would leave at least each row's page mapped, and the kernel maps pages around it.
    rng = np.random.default_rng(0)
    store = MemmapStore(tmp_path)
    store.batch_add(rng.normal(size=(20_000, 128)).astype(np.float32), labels=np.arange(20_000))
    before = _resident_file_bytes()
    ids = rng.choice(20_000, 500, replace=False)
    got = store.batch_get(ids.tolist())
    assert got[1] == ids.tolist()
    assert _resident_file_bytes() - before < 1 << 20


def test_a_store_loaded_in_place_reads_the_files_it_loaded(tmp_path):
    # A save over the folder (Indexer.save switches folders by renames) does not mix the
    # replaced files with the ones a loaded store reads.
    embeddings, labels, _ = _records()
    MemmapStore(tmp_path / "saved").batch_add(embeddings, labels)
    store = MemmapStore(tmp_path / "saved")
    store.load(tmp_path / "saved")
    (tmp_path / "saved").rename(tmp_path / "old")
    MemmapStore(tmp_path / "saved").batch_add(embeddings[:2] + 1, [9, 9])
    got = store.batch_get([5, 0])
    np.testing.assert_array_equal(got[0], embeddings[[5, 0]])
    assert got[1] == [labels[5], labels[0]]


def test_passes_over_every_row_read_by_position_not_through_a_map(tmp_path, monkeypatch):
    # Through a map, each pass (the check at load, keep, the copy before a change) would leave
    # the whole file resident until it ends.
    embeddings, labels, images = _records(count=9)
    MemmapStore(tmp_path / "live").batch_add(embeddings, labels, images)
    MemmapStore(tmp_path / "live").save(tmp_path / "saved")

    def refuse(*args, **kwargs):
        raise AssertionError("a pass over every row mapped a file")

    monkeypatch.setattr(np, "memmap", refuse)
    copy = MemmapStore(tmp_path / "copy")
    assert copy.load(tmp_path / "saved") == 9
    store = MemmapStore(tmp_path / "saved")
    store.load(tmp_path / "saved")
    store.add(embeddings[0], labels[0], images[0])
    store.keep(np.arange(10) % 3 != 1)
    want = [0, 2, 3, 5, 6, 8, 9]
    got = store.batch_get(range(7))
    np.testing.assert_array_equal(got[0], np.concatenate([embeddings, embeddings[:1]])[want])
    np.testing.assert_array_equal(np.stack(got[2]), np.concatenate([images, images[:1]])[want])
    assert copy.batch_get([8])[1] == [labels[8]]
