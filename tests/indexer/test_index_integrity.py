"""A saved index folder loads whole or is refused whole (project issue 29).

Each probe edits one file of a saved folder the way a bad copy, a hand edit
or another tool could, and checks that `Indexer.load` (and the model's
`load_index`, which `tfsim lookup` calls) refuses it with a message naming
the file, before anything changes. The structural probes run twice: with the
checksums `save` records (the checksum refuses the edit) and with them
removed, as in an index saved before checksums (the structural check
refuses it).
"""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest

from tensorflow_similarity.indexer import METADATA_FILE, Indexer
from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.models.index_mixin import index_path
from tensorflow_similarity.stores import MemmapStore
from tensorflow_similarity.stores.npz import write_npz

DIM = 5
SIZE = 160
CHECKSUMS = ("files", "metadata_sha256")


def _data(n=SIZE, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=n)
    centres = np.random.default_rng(100).normal(size=(4, DIM)) * 2.0
    return (centres[labels] + rng.normal(size=(n, DIM))).astype(np.float32), labels


def _saved(folder, search="linear", kv_store="memory"):
    x, y = _data()
    index = Indexer(embedding_size=DIM, distance="cosine", search=search, kv_store=kv_store)
    data = np.arange(SIZE * 2).reshape(SIZE, 2)
    index.batch_add(x, labels=y, data=data, verbose=0)
    index.save(folder)
    return index


def _metadata(folder):
    return json.loads((folder / METADATA_FILE).read_text())


def _strip_checksums(folder):
    """Makes the folder look saved before checksums were recorded."""
    metadata = {k: v for k, v in _metadata(folder).items() if k not in CHECKSUMS}
    (folder / METADATA_FILE).write_text(json.dumps(metadata))


def _rewrite_search(folder, change):
    """Rewrites linear_search.npz as a valid file whose arrays `change(arrays)` returns.

    `arrays` also holds the store's `"embeddings"` (memory_store_embeddings.npy, which
    the search reads), written back too.
    """
    with np.load(folder / "linear_search.npz") as npz:
        arrays = {key: npz[key] for key in npz.files if key not in ("kind", "format_version")}
    rows_file = folder / "memory_store_embeddings.npy"
    if rows_file.exists():
        arrays["embeddings"] = np.load(rows_file)
    changed = change(dict(arrays))
    if rows_file.exists():
        np.save(rows_file, changed.pop("embeddings"))
        arrays.pop("embeddings")
    if any(changed[key] is not arrays[key] for key in arrays):
        write_npz(folder / "linear_search.npz", changed, kind="LinearSearch", format_version=2)


def _first_rows(arrays, n=100):
    return {
        **arrays,
        **{key: arrays[key][:n] for key in ("idxs", "alive", "squared_norms")},
    }


def _reversed_ids(arrays):
    return {**arrays, "idxs": arrays["idxs"][::-1].copy()}


def _nan_rows(arrays, n=80):
    embeddings = arrays["embeddings"].copy()
    embeddings[:n] = np.nan
    return {**arrays, "embeddings": embeddings}


def _flip_byte(file, offset):
    content = bytearray(file.read_bytes())
    content[offset] ^= 0x01
    file.write_bytes(bytes(content))


CHECKSUM_MESSAGE = "changed after the index was saved|bytes but was saved with"


@pytest.mark.parametrize("checksums", ["recorded", "absent"])
@pytest.mark.parametrize(
    "change, message",
    [
        (
            _first_rows,
            "linear_search.npz holds 100 embeddings but index_metadata.json says the index "
            "holds 160",
        ),
        (_reversed_ids, r"linear_search.npz gives its row 0 the id 159.*, 0 to 159 in order"),
        (_nan_rows, "memory_store_embeddings.npy.* 80 embeddings with NaN or infinite values"),
    ],
    ids=["truncated", "reversed-ids", "nan-rows"],
)
def test_a_search_file_that_disagrees_with_the_index_is_refused(
    tmp_path, change, message, checksums
):
    _saved(tmp_path)
    _rewrite_search(tmp_path, change)
    if checksums == "absent":
        _strip_checksums(tmp_path)
    else:
        file = message.split(".")[0]
        message = f"{file}.*({CHECKSUM_MESSAGE})"
    with pytest.raises(ValueError, match=message):
        Indexer.load(tmp_path, verbose=0)


def test_a_hand_edited_search_name_is_a_clear_value_error(tmp_path):
    _saved(tmp_path)
    metadata = _metadata(tmp_path)
    (tmp_path / METADATA_FILE).write_text(json.dumps({**metadata, "search": "faiss"}))
    with pytest.raises(ValueError, match=r"'search' is 'faiss'.*search_config.*max_chunk_elements"):
        Indexer.load(tmp_path, verbose=0)


def test_a_search_config_of_another_distance_or_size_is_refused(tmp_path):
    _saved(tmp_path)
    metadata = _metadata(tmp_path)
    config = {**metadata["search_config"], "dim": DIM + 1}
    (tmp_path / METADATA_FILE).write_text(json.dumps({**metadata, "search_config": config}))
    with pytest.raises(ValueError, match=r"search_config has dim=6.*embedding_size 5"):
        Indexer.load(tmp_path, verbose=0)


def _zip_timestamp(file):
    # A byte of the first member's modification time: the zip reads it without complaint,
    # so only the checksum sees the change.
    _flip_byte(file, 10)


def _metadata_value(folder):
    metadata = (folder / METADATA_FILE).read_text()
    (folder / METADATA_FILE).write_text(
        metadata.replace('"stat_buffer_size": 1000', '"stat_buffer_size": 1001')
    )


@pytest.mark.parametrize("name", ["linear_search.npz", "memory_store.npz", METADATA_FILE])
def test_a_byte_changed_in_any_file_of_a_memory_index_is_refused(tmp_path, name):
    _saved(tmp_path)
    if name == METADATA_FILE:
        _metadata_value(tmp_path)
    else:
        _zip_timestamp(tmp_path / name)
    with pytest.raises(ValueError, match=f"{name}.*({CHECKSUM_MESSAGE})"):
        Indexer.load(tmp_path, verbose=0)


@pytest.mark.parametrize("name", ["linear_search.npz", "memory_store.npz"])
def test_a_truncated_file_is_refused_by_its_length(tmp_path, name):
    _saved(tmp_path)
    file = tmp_path / name
    file.write_bytes(file.read_bytes()[:-10])
    with pytest.raises(ValueError, match=f"{name} holds .* bytes but was saved with"):
        Indexer.load(tmp_path, verbose=0)


@pytest.mark.parametrize(
    "name, offset",
    [
        ("embeddings.bin", 4 * DIM * 7 + 1),
        ("labels.bin", 8 * 3),
        ("has_label.bin", 5),
        ("data.bin", 8 * 2 * 9),
    ],
)
def test_a_byte_changed_in_a_memmap_store_file_is_refused(tmp_path, name, offset):
    _saved(tmp_path / "index", kv_store=MemmapStore(tmp_path / "live"))
    _flip_byte(tmp_path / "index" / name, offset)
    with pytest.raises(ValueError, match=f"{name}.*{CHECKSUM_MESSAGE}"):
        Indexer.load(tmp_path / "index", verbose=0)


def test_a_changed_memmap_description_is_refused(tmp_path):
    _saved(tmp_path / "index", kv_store=MemmapStore(tmp_path / "live"))
    meta = tmp_path / "index" / "memmap_store.json"
    meta.write_text(meta.read_text().replace('"<i8"', '"<u8"'))
    with pytest.raises(ValueError, match=f"memmap_store.json.*{CHECKSUM_MESSAGE}"):
        Indexer.load(tmp_path / "index", verbose=0)


def test_nan_rows_in_a_store_are_refused(tmp_path):
    _saved(tmp_path / "index", kv_store=MemmapStore(tmp_path / "live"))
    embeddings = np.memmap(tmp_path / "index" / "embeddings.bin", np.float32, "r+")
    embeddings[: 2 * DIM] = np.nan
    embeddings.flush()
    del embeddings
    _strip_checksums(tmp_path / "index")
    with pytest.raises(ValueError, match="embeddings.bin' holds 2 embeddings with NaN"):
        Indexer.load(tmp_path / "index", verbose=0)


def test_records_appended_to_a_memmap_index_loaded_in_place_leave_the_folder_whole(tmp_path):
    _saved(tmp_path / "index", kv_store=MemmapStore(tmp_path / "live"))
    loaded = Indexer.load(tmp_path / "index", verbose=0)
    loaded.add(np.ones(DIM, np.float32), label=1, data=np.array([-1, -1]))
    assert Indexer.load(tmp_path / "index", verbose=0).size() == SIZE
    loaded.save(tmp_path / "index")
    assert Indexer.load(tmp_path / "index", verbose=0).size() == SIZE + 1


def test_bytes_a_crashed_append_left_after_the_records_do_not_matter(tmp_path):
    _saved(tmp_path / "index", kv_store=MemmapStore(tmp_path / "live"))
    with open(tmp_path / "index" / "embeddings.bin", "ab") as handle:
        handle.write(b"\x00" * 7)
    assert Indexer.load(tmp_path / "index", verbose=0).size() == SIZE


def test_a_missing_file_is_refused(tmp_path):
    _saved(tmp_path / "index", kv_store=MemmapStore(tmp_path / "live"))
    (tmp_path / "index" / "labels.bin").unlink()
    with pytest.raises(ValueError, match="labels.bin.* missing"):
        Indexer.load(tmp_path / "index", verbose=0)


def test_a_whole_index_without_checksums_still_loads(tmp_path):
    index = _saved(tmp_path)
    _strip_checksums(tmp_path)
    queries, _ = _data(n=6, seed=3)
    loaded = Indexer.load(tmp_path, verbose=0)
    assert loaded.batch_lookup(queries, k=4, verbose=0) == index.batch_lookup(
        queries, k=4, verbose=0
    )


def test_save_records_a_checksum_of_every_file_it_wrote(tmp_path):
    _saved(tmp_path / "index", kv_store=MemmapStore(tmp_path / "live"))
    files = _metadata(tmp_path / "index")["files"]
    assert set(files) == {
        "linear_search.npz",
        "index_items.npz",
        "memmap_store.json",
        "embeddings.bin",
        "labels.bin",
        "has_label.bin",
        "data.bin",
    }
    assert files["embeddings.bin"]["bytes"] == SIZE * DIM * 4
    assert all(len(entry["sha256"]) == 64 for entry in files.values())


def test_faiss_index_files_are_checked_too(tmp_path):
    pytest.importorskip("faiss")
    _saved(tmp_path, search="faiss")
    _zip_timestamp(tmp_path / "faiss_search.npz")
    with pytest.raises(ValueError, match=f"faiss_search.npz.*({CHECKSUM_MESSAGE})"):
        Indexer.load(tmp_path, verbose=0)


def test_a_refused_load_into_a_given_store_leaves_it_as_it_was(tmp_path):
    _saved(tmp_path / "index", kv_store=MemmapStore(tmp_path / "live"))
    _rewrite_search(tmp_path / "index", _first_rows)
    given = MemmapStore(tmp_path / "given")
    given.batch_add(np.ones((3, DIM)), labels=[7, 8, 9])
    with pytest.raises(ValueError, match="linear_search.npz"):
        Indexer.load(tmp_path / "index", verbose=0, kv_store=given)
    assert given.size() == 3 and MemmapStore(tmp_path / "given").size() == 3
    assert [given.get(i)[1] for i in range(3)] == [7, 8, 9]


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    embeddings = keras.layers.Dense(DIM)(keras.layers.Flatten()(inputs))
    model = SimilarityModel(inputs, embeddings, name="sim")
    model.compile("sgd", "mse", distance="cosine")
    return model


def test_a_model_keeps_its_index_after_a_refused_load(tmp_path):
    model = _model()
    images = np.random.default_rng(0).random((SIZE, 8, 8, 3), dtype=np.float32)
    labels = np.arange(SIZE) % 4
    model.index(images, labels, verbose=0)
    model.save_index(tmp_path / "m.keras")
    before = model.lookup(images[:3], k=5, verbose=0)
    _rewrite_search(index_path(tmp_path / "m.keras"), _reversed_ids)
    with pytest.raises(ValueError, match="linear_search.npz"):
        model.load_index(tmp_path / "m.keras")
    assert model.index_size() == SIZE
    assert model.lookup(images[:3], k=5, verbose=0) == before
