"""The metadata file of a saved index, and the checks `load` makes with it.

Its name and format version, reading it, the checksums `save` records in
it (of every file the search and the store wrote, and of the metadata's
own content) and their verification, and the check that a loaded search
holds the ids the metadata says. Every failed check raises the error
`corrupt_error` makes, which names the folder and says nothing was loaded.
`tensorflow_similarity.indexer.persistence` describes the format whole.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tensorflow_similarity import _atomic
from tensorflow_similarity.search import Search

METADATA_FILE = "index_metadata.json"
# 2: the store is saved as its class and config (1 saved "memory" or nothing). The
# checksums ("files", "metadata_sha256") were added within version 2: metadata without
# them still loads (see load).
# 3: the items' ids and tombstones (ITEMS_FILE, "next_id"); the embeddings raw, once (the
# search's own files and the store's). Version 2 still loads: its items are ids 0 to
# size - 1, all alive.
FORMAT_VERSION = 3
READ_VERSIONS = (2, 3)
ITEMS_FILE = "index_items.npz"


def read_metadata(path: str | Path) -> dict[str, Any]:
    """Returns the metadata of the index saved in directory `path`.

    Raises:
        FileNotFoundError: If `path` holds no saved index.
        ValueError: If the metadata is corrupt or of another format
            version.
    """
    file = _atomic.readable_dir(path) / METADATA_FILE
    if not file.is_file():
        raise FileNotFoundError(
            f"No saved index in {str(path)!r} (no {METADATA_FILE}). Pass the directory "
            "Indexer.save (or SimilarityModel.save_index) wrote."
        )
    try:
        metadata = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{file} is corrupt ({error}); save the index again.") from None
    version = metadata.get("format_version") if isinstance(metadata, dict) else None
    if version not in READ_VERSIONS:
        raise ValueError(
            f"{file} is of index format version {version!r}; this version reads "
            f"{' and '.join(map(str, READ_VERSIONS))}. Re-create the index with this version "
            "(an index of version 1, from tensorflow-similarity 0.17, cannot be read: index "
            "the examples again)."
        )
    return metadata


def corrupt_error(path: Path, problem: str) -> ValueError:
    """The error of a saved index whose files disagree: `problem`, and what to do."""
    return ValueError(
        f"The index in {str(path)!r} is corrupt: {problem}. Nothing was loaded. Restore the "
        "folder from a whole copy, or index the examples again and save them."
    )


def recorded_checksums(path: Path, metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The `"files"` checksums of the metadata, or `None` for an index saved without them."""
    files, digest = metadata.get("files"), metadata.get("metadata_sha256")
    if files is None and digest is None:
        return None
    if not isinstance(files, dict) or not isinstance(digest, str):
        raise corrupt_error(
            path,
            f"its {METADATA_FILE} holds 'files' {type(files).__name__} and 'metadata_sha256' "
            f"{type(digest).__name__}: checksums are recorded as both, a dict and a string",
        )
    return files


def verify_checksums(path: Path, metadata: dict[str, Any], files: dict[str, Any]) -> None:
    """Raises unless the metadata's content and every file in `files` are as saved."""
    if metadata_digest(metadata) != metadata["metadata_sha256"]:
        raise corrupt_error(
            path,
            f"{METADATA_FILE} changed after the index was saved (the SHA-256 of its content "
            "differs from the metadata_sha256 it records)",
        )
    for name, entry in files.items():
        if Path(name).name != name or name == METADATA_FILE:
            raise corrupt_error(path, f"its {METADATA_FILE} records a checksum of {name!r}")
        try:
            digest, length, appendable = entry["sha256"], int(entry["bytes"]), entry["appendable"]
        except (KeyError, TypeError, ValueError):
            raise corrupt_error(
                path, f"its {METADATA_FILE} records {name}'s checksum as {entry!r}"
            ) from None
        file = path / name
        if not file.is_file():
            raise corrupt_error(path, f"{name} is missing (the index was saved with it)")
        size = file.stat().st_size
        if size < length or (size > length and not appendable):
            raise corrupt_error(
                path,
                f"{name} holds {size} bytes but was saved with {length}: it was "
                f"{'truncated or ' * (size < length)}rewritten after the index was saved",
            )
        if _sha256(file, length) != digest:
            raise corrupt_error(
                path,
                f"{name} changed after the index was saved (its SHA-256 differs from the one "
                f"{METADATA_FILE} records)",
            )


def check_search_ids(path: Path, search: Search, expected: np.ndarray) -> None:
    """Raises unless `search` holds the items `expected` (their ids, in order), and no other."""
    saved = search.saved_files()
    file = saved[0] if saved else type(search).__name__
    size = len(expected)
    if search.size() != size:
        raise corrupt_error(
            path,
            f"{file} holds {search.size()} embeddings but {METADATA_FILE} says the index "
            f"holds {size}",
        )
    ids = search.ids()
    wrong = np.flatnonzero(ids != expected)
    if len(wrong):
        row = int(wrong[0])
        want = (
            f"0 to {size - 1} in order"
            if np.array_equal(expected, np.arange(size))
            else f"those of {ITEMS_FILE} in order"
        )
        raise corrupt_error(
            path,
            f"{file} gives its row {row} the id {int(ids[row])}, but an index's search holds "
            f"the ids of the index's items, {want}",
        )


def checksum(file: Path, length: int | None) -> dict[str, Any]:
    """The checksum entry of `file`: of all of it, or of its first `length` bytes."""
    size = file.stat().st_size if length is None else length
    return {"sha256": _sha256(file, size), "bytes": size, "appendable": length is not None}


def _sha256(file: Path, length: int) -> str:
    """The hex SHA-256 of the first `length` bytes of `file`, read a chunk at a time."""
    return _atomic.sha256_file(file, length)


def metadata_digest(metadata: dict[str, Any]) -> str:
    """The hex SHA-256 of the metadata's content but its own digest, as sorted JSON."""
    content = {k: v for k, v in metadata.items() if k != "metadata_sha256"}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()
