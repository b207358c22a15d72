"""How an index is saved to a directory and read back (`Indexer.save`, `Indexer.load`).

`save_index` writes a `SavedIndex` (the record `Indexer.to_saved_index`
makes) and `read_index` reads one back, checked whole, which
`Indexer.from_saved_index` turns into an index: this module works on the
record and knows nothing of `Indexer`.

The store keeps its kind. A `MemoryStore` is written into the folder and
read back into memory. A `MemmapStore`'s files are copied into the
folder (unless it already lives there), and `load` memory-maps them
where they are, in the saved folder, copying nothing, which is what a
larger-than-memory index needs. They are copy-on-write: the first record
added to the loaded index copies the store's files into a private
folder beside the saved one (see `MemmapStore`), and a `reset()` starts
an empty one, so the saved folder is never written to and loads as
saved; save the index (there or elsewhere) to keep what was added. To
copy the records into a folder of your choice at load, pass
`kv_store=MemmapStore(other_folder)` to `load`.
Another `Store` subclass is saved as its class name and config; `load`
needs an instance of it (`kv_store=...`) to read the records into.

A folder loads whole or not at all. `save` records in the metadata a
SHA-256 checksum and the length of every file the search and the store
wrote (`"files"`, as their `saved_files` name them), and one of the
metadata's own content (`"metadata_sha256"`); `load` verifies them all,
then checks that the files agree with each other (see `Indexer.load`), before
it reads anything into an index. A `MemmapStore`'s description
(`memmap_store.json`) is checksummed whole and each of its column files
up to the end of the saved records: bytes past them (a crashed append)
do not count.

A save replaces a folder whole or not at all: everything is written into
the hidden sibling `.NAME.partial`, flushed to disk, and switched in by
renames (`tensorflow_similarity._atomic`), so a kill or a full disk at any
moment leaves the old save or the new one; `load` reads the old one from
its backup sibling `.NAME.old` if the kill came between the renames, and
the next save tidies up. A failed save raises an `OSError` naming the file
(and, for a full disk, the space left) and leaves the old save as it was.
A `MemmapStore` that lives in the folder is copied into the new one too.
An index saved with its model (`SimilarityModel.save`) records the model's
identity (`"model"`: the SHA-256 of its file and of its weights), which
`load_index` of the model checks. Every index records its
`embedding_fingerprint` (the weights that made its embeddings, `null` if
unknown); one saved before it was recorded loads with `None`.
"""

from __future__ import annotations

import errno
import inspect
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tensorflow_similarity import _atomic
from tensorflow_similarity._validation import check_int
from tensorflow_similarity.classification_metrics import make_classification_metric
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.indexer._checks import check_component
from tensorflow_similarity.indexer._metadata import (
    FORMAT_VERSION,
    ITEMS_FILE,
    METADATA_FILE,
    check_search_ids,
    checksum,
    corrupt_error,
    metadata_digest,
    read_metadata,
    recorded_checksums,
    verify_checksums,
)
from tensorflow_similarity.indexer.lifecycle import ItemTable, share_rows
from tensorflow_similarity.indexer.saved_index import SavedIndex
from tensorflow_similarity.search import SEARCH_NAMES, Search
from tensorflow_similarity.stores import STORE_CLASSES, MemmapStore, Store
from tensorflow_similarity.stores.memmap_store import META_NAME as MEMMAP_META_NAME
from tensorflow_similarity.stores.npz import read_npz, refuse_pickled, write_npz


def save_index(saved: SavedIndex, path: str | Path, compression: bool = True) -> None:
    """Writes `saved` into the directory `path`, whole or not at all: see `Indexer.save`."""
    path = Path(path)
    _atomic.recover_dir(path)
    staged = stage_index(saved, path, compression=compression)
    try:
        old = _atomic.switch_dir(staged, path)
    except OSError as error:
        _atomic.discard_dir(staged)
        _atomic.recover_dir(path)
        raise save_failed(error, "Saving the index", path) from error
    _atomic.discard_dir(old)


def stage_index(
    saved: SavedIndex,
    path: str | Path,
    compression: bool = True,
    model: dict[str, str] | None = None,
) -> Path:
    """Writes `saved` into the staging sibling of `path` and returns that folder.

    `_atomic.switch_dir` switches it in. On any error the staging folder is
    deleted and an `OSError` names the save, the file and, for a full disk,
    the space left.

    Args:
        saved: The index to save (`Indexer.to_saved_index()`).
        path: The folder the save is for.
        compression: Whether the store compresses its data.
        model: The identity of the model saved with it (`"sha256"` of its
            file, `"weights_sha256"` of its weights), recorded in the
            metadata so that a mismatched pair is refused at load.
    """
    staged = _atomic.staging_path(Path(path))
    _atomic.discard_dir(staged)
    try:
        _write_index(saved, staged, compression, model)
    except BaseException as error:
        _atomic.discard_dir(staged)
        if isinstance(error, OSError):
            raise save_failed(error, "Saving the index", Path(path)) from error
        raise
    return staged


def save_failed(error: OSError, what: str, destination: Path) -> OSError:
    """An `OSError` saying that `what` to `destination` failed, on what file, and why.

    A full disk also says the space left there; the message says the
    previous save is kept, which the staging of every save guarantees.
    """
    file = error.filename or destination
    reason = error.strerror or str(error)
    free = ""
    if error.errno == errno.ENOSPC:
        try:
            left = shutil.disk_usage(destination.parent if destination.parent.exists() else ".")
            free = f" ({left.free / 2**20:.1f} MiB free on that disk)"
        except OSError:
            free = ""
    return OSError(
        error.errno,
        f"{what} to {str(destination)!r} failed writing {str(file)!r}: {reason}{free}. "
        "The previous save there (if any) is unchanged; free space or choose another "
        "folder and save again.",
    )


def _write_index(
    saved: SavedIndex, path: Path, compression: bool, model: dict[str, str] | None
) -> None:
    """Writes the store's and the search's files, then the metadata, into `path`."""
    path.mkdir(parents=True)
    search, store, items = saved.search, saved.kv_store, saved.items
    metadata = {
        "format_version": FORMAT_VERSION,
        "size": saved.size,
        "rows": len(items),
        "next_id": items.next_id,
        "distance": saved.distance.name,
        "embedding_size": saved.embedding_size,
        "embedding_output": saved.embedding_output,
        "search": _search_name(search),
        "search_config": search.get_config(),
        "kv_store": {
            "class_name": type(store).__name__,
            # A memmap store is reopened where it was saved, not where it lived.
            "config": {k: v for k, v in store.get_config().items() if k != "path"},
        },
        "evaluator": saved.evaluator,
        "stat_buffer_size": saved.stat_buffer_size,
        "is_calibrated": saved.is_calibrated,
        "calibration_metric": saved.calibration_metric.get_config(),
        "cutpoints": saved.cutpoints,
        "calibration_thresholds": {
            k: np.asarray(v).tolist() for k, v in saved.calibration_thresholds.items()
        },
        "embedding_fingerprint": saved.embedding_fingerprint,
    }
    store.save(path, compression=compression)
    search.save(path)
    write_npz(
        path / ITEMS_FILE,
        {"ids": items.ids(), "alive": items.alive()},
        kind="Indexer",
        format_version=1,
        compression=False,
    )
    files: dict[str, int | None] = dict.fromkeys([*search.saved_files(), ITEMS_FILE])
    files.update(store.saved_files(path))
    metadata["files"] = {name: checksum(path / name, length) for name, length in files.items()}
    if model is not None:
        metadata["model"] = dict(model)
    metadata["metadata_sha256"] = metadata_digest(json.loads(json.dumps(metadata)))
    _atomic.write_text(path / METADATA_FILE, json.dumps(metadata))


def read_index(
    path: str | Path,
    verbose: int = 1,
    *,
    distance: Distance | str | None = None,
    embedding_size: int | None = None,
    kv_store: Store | None = None,
    safe_mode: bool = True,
    search_options: Mapping[str, Any] | None = None,
) -> SavedIndex:
    """Reads the index saved in `path` as a `SavedIndex`, checked whole (see `Indexer.load`).

    Before any record is read into a store, `read_index` checks, in order:
    the metadata (its format version, the distance and size asked for,
    a `search_config` that builds the saved search class with the
    index's distance and size); in safe mode, that no `.npz` file holds
    pickled data; the checksums `save` recorded, of the metadata's
    content and of each file (a file changed, truncated or missing is
    refused); then, reading the files, that the search holds finite
    embeddings, as many as the metadata's `size`, under the store's ids
    `0` to `size - 1` in order, and that the store holds `size` finite
    embeddings of `embedding_size`. Every error names the file and what
    disagrees.

    An index saved before checksums were recorded (its metadata has no
    `"files"`) still loads, after the same checks less the checksums;
    such an index cannot tell a file edited consistently from the one
    saved, and a store given as `kv_store` is checked only once its
    records are read into it. Save it again to record its checksums.

    A failed check raises and leaves nothing loaded.

    Args:
        path: The directory `save_index` wrote.
        verbose: Print what is loaded if 1.
        distance: If given, the distance the saved index must use.
        embedding_size: If given, the dimension the saved index must have.
        kv_store: A store of the saved store's class to read the records
            into. Defaults to a new one (see the module).
        safe_mode: Refuse pickled data if `True`.
        search_options: Arguments of the saved search's class that the save
            does not record (see `Indexer.load`), or `None`.

    Returns:
        The saved index, its search and store holding the saved records.

    Raises:
        FileNotFoundError: If `path` holds no saved index.
        ValueError: If a check above fails.
    """
    path = _atomic.readable_dir(path)
    metadata = read_metadata(path)
    saved_distance = distance_canonicalizer(metadata["distance"])
    if distance is not None and distance_canonicalizer(distance).name != saved_distance.name:
        raise ValueError(
            f"The index in {str(path)!r} was saved with distance "
            f"{saved_distance.name!r}, not {distance_canonicalizer(distance).name!r}. "
            "Create the index (compile or create_index) with the saved distance, or "
            "re-index the examples."
        )
    if embedding_size is not None and metadata["embedding_size"] != embedding_size:
        raise ValueError(
            f"The index in {str(path)!r} holds embeddings of size "
            f"{metadata['embedding_size']}, not {embedding_size}: it was saved from "
            "another model. Load it into a model of that output size, or re-index."
        )
    search = _saved_search(path, metadata, search_options)
    checksums = recorded_checksums(path, metadata)
    if checksums is not None:
        if safe_mode:
            # Before the checksums, so that pickled data are refused as such.
            for name in (name for name in checksums if name.endswith(".npz")):
                owner = (
                    type(search).__name__
                    if name in search.saved_files()
                    else metadata["kv_store"]["class_name"]
                )
                refuse_pickled(path / name, owner=owner)
        verify_checksums(path, metadata, checksums)
    store = _saved_store(path, metadata["kv_store"], kv_store)
    # The settings Indexer's constructor checks, checked before any record is read.
    check_int("embedding_size", metadata["embedding_size"], minimum=1, owner="Indexer")
    check_int(
        "embedding_output",
        metadata["embedding_output"],
        minimum=0,
        allow_none=True,
        owner="Indexer",
    )
    check_int("stat_buffer_size", metadata["stat_buffer_size"], minimum=1, owner="Indexer")
    check_component("evaluator", metadata["evaluator"] or "memory", Evaluator, ("memory",))
    # Before the search loads: a LinearSearch that reads the store's rows saves none.
    share_rows(search, store)
    if checksums is not None:
        for name in [*search.saved_files(), *store.saved_files(path)]:
            # A file a version-2 save did not write is not read either: its load says so.
            if name not in checksums and (path / name).exists():
                raise corrupt_error(
                    path,
                    f"{METADATA_FILE} records no checksum of {name}, which the index reads",
                )
    items = _saved_items(path, metadata)
    if verbose:
        print(f"Loading an index of {metadata['size']} embeddings from {path}")
    # The search first, so that a refused search leaves a given store as it was.
    search.load(path)
    check_search_ids(path, search, items.alive_ids())
    store.load(path, safe_mode=safe_mode)
    if store.size() != len(items):
        raise corrupt_error(
            path,
            f"its metadata says {len(items)} rows of embeddings, its store holds {store.size()}",
        )
    if items.alive_count and store.dim != metadata["embedding_size"]:
        raise corrupt_error(
            path,
            f"its metadata says embeddings of size {metadata['embedding_size']}, its "
            f"store holds embeddings of size {store.dim}",
        )
    # Absent from an index saved before fingerprints were recorded: unknown.
    fingerprint = metadata.get("embedding_fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        raise corrupt_error(
            path, f"its {METADATA_FILE} embedding_fingerprint is not a string: {fingerprint!r}"
        )
    saved = SavedIndex(
        embedding_size=metadata["embedding_size"],
        distance=saved_distance,
        search=search,
        kv_store=store,
        items=items,
        evaluator=metadata["evaluator"],
        embedding_output=metadata["embedding_output"],
        stat_buffer_size=metadata["stat_buffer_size"],
        embedding_fingerprint=fingerprint,
    )
    if metadata["is_calibrated"]:
        config = metadata["calibration_metric"]
        saved.is_calibrated = True
        saved.calibration_metric = make_classification_metric(
            config.get("canonical_name", config.get("name")), name=config.get("name", "")
        )
        saved.cutpoints = metadata["cutpoints"]
        saved.calibration_thresholds = {
            k: np.asarray(v) for k, v in metadata["calibration_thresholds"].items()
        }
    return saved


def _saved_items(path: Path, metadata: dict[str, Any]) -> ItemTable:
    """The saved items' ids, tombstones and next id (ids 0 to size - 1 in version 2)."""
    items = ItemTable()
    size = metadata["size"]
    if metadata["format_version"] == 2:
        items.append(np.arange(size, dtype=np.int64))
        return items
    arrays = read_npz(
        path / ITEMS_FILE, kind="Indexer", format_version=1, keys=("ids", "alive"), owner="Indexer"
    )
    ids, alive, next_id = arrays["ids"], arrays["alive"], metadata.get("next_id")
    consistent = (
        ids.ndim == 1
        and np.issubdtype(ids.dtype, np.integer)
        and alive.shape == ids.shape
        and alive.dtype == bool
        and len(ids) == metadata.get("rows")
        and int(alive.sum()) == size
        and isinstance(next_id, int)
        and (not len(ids) or (ids.min() >= 0 and ids.max() < next_id))
        and len(np.unique(ids[alive])) == size
    )
    if not consistent:
        raise corrupt_error(
            path,
            f"{ITEMS_FILE} ({len(ids)} ids, {int(alive.sum())} alive) disagrees with "
            f"{METADATA_FILE} (rows {metadata.get('rows')!r}, size {size}, next_id "
            f"{next_id!r}), or gives one id to two items",
        )
    items.replace(ids.astype(np.int64), alive)
    items.next_id = next_id
    return items


def _saved_search(
    path: Path, metadata: dict[str, Any], options: Mapping[str, Any] | None = None
) -> Search:
    """A new, empty search of the saved class and config, checked against the metadata.

    `options` are given to the class's constructor with the saved config:
    only arguments the save did not record (a Milvus `token`), checked
    before the search is built.
    """
    name, config = metadata["search"], metadata["search_config"]
    if name not in SEARCH_NAMES:
        kind = config.get("name", "?") if isinstance(config, dict) else "?"
        raise ValueError(
            f"The index in {str(path)!r} was saved with a search of type {kind!r}, which "
            f"Indexer.load cannot rebuild (it rebuilds {tuple(SEARCH_NAMES)}). Re-index with "
            "one of those."
        )
    search_class = SEARCH_NAMES[name]
    if not isinstance(config, dict):
        raise corrupt_error(path, f"its {METADATA_FILE} search_config is not a dict: {config!r}")
    for key, field in (("distance", "distance"), ("dim", "embedding_size")):
        if config.get(key) != metadata[field]:
            raise corrupt_error(
                path,
                f"its {METADATA_FILE} search_config has {key}={config.get(key)!r} but the index "
                f"has {field} {metadata[field]!r}",
            )
    options = _checked_search_options(path, search_class, config, options)
    try:
        return search_class.from_config({**config, **options})
    except (TypeError, ValueError) as error:
        if options:
            raise ValueError(
                f"The {search_class.__name__} of the index in {str(path)!r} could not be built "
                f"with search_options {options!r}: {error}"
            ) from error
        raise corrupt_error(
            path,
            f"its {METADATA_FILE} says 'search' is {name!r} but its search_config is not a "
            f"{search_class.__name__}'s ({error})",
        ) from None


def _checked_search_options(
    path: Path, search_class: type[Search], config: dict[str, Any], options: Any
) -> dict[str, Any]:
    """`options` as a dict of constructor arguments the saved `config` does not hold."""
    if options is None:
        return {}
    owner = search_class.__name__
    if not isinstance(options, Mapping) or not all(isinstance(key, str) for key in options):
        raise ValueError(
            f"search_options must be a dict of {owner} arguments by name; got {options!r}."
        )
    parameters = inspect.signature(search_class.__init__).parameters
    settable = sorted(
        key for key in parameters if key not in ("self", "args", "kwargs") and key not in config
    )
    for key in options:
        if key in config:
            raise ValueError(
                f"search_options cannot change {key!r}: the index in {str(path)!r} recorded "
                f"{key}={config[key]!r} with its {owner}, and its files hold that search. "
                f"search_options takes what a save does not record: {settable or 'nothing'}."
            )
        if key not in parameters:
            raise ValueError(
                f"search_options names {key!r}, which is not an argument of {owner}; it takes "
                f"what a save does not record: {settable or 'nothing'}."
            )
    return dict(options)


def _saved_store(path: Path, saved: dict[str, Any], given: Store | None) -> Store:
    """The store to read the saved records into: `given`, or a new one of the saved class."""
    class_name, config = saved["class_name"], saved["config"]
    if given is not None:
        if type(given).__name__ != class_name:
            raise ValueError(
                f"The index in {str(path)!r} was saved with a {class_name}, so its records can "
                f"only be read into a {class_name}, not a {type(given).__name__}. Pass "
                f"kv_store={class_name}(...) or none."
            )
        return given
    if class_name not in STORE_CLASSES:
        raise ValueError(
            f"The index in {str(path)!r} was saved with a store of class {class_name!r}, which "
            f"Indexer.load cannot create by itself (it creates {sorted(STORE_CLASSES)}). Pass "
            f"kv_store={class_name}(...) to read the records into."
        )
    if STORE_CLASSES[class_name] is MemmapStore:
        if not (path / MEMMAP_META_NAME).is_file():
            raise FileNotFoundError(
                f"The index in {str(path)!r} was saved with a MemmapStore but its files "
                f"({MEMMAP_META_NAME}, *.bin) are missing. Save the index again."
            )
        return MemmapStore(path, **config)
    return STORE_CLASSES[class_name](**config)


def _search_name(search: Search) -> str | None:
    return next((name for name, cls in SEARCH_NAMES.items() if type(search) is cls), None)
