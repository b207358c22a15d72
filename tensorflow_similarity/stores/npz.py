"""Versioned `.npz` files, written atomically and read completely or not at all.

Searches and stores save their content as one `.npz` file holding a
`format_version`, a `kind` (the class that wrote it) and their arrays. A
file is written beside its destination and renamed over it, so a crash
never leaves half a file; a file is read into memory entirely, and checked,
before the caller touches its own state, so a bad file changes nothing.

Files are untrusted: an array of Python objects is stored pickled, and
unpickling runs whatever code the file names, so `read_npz` refuses such an
array unless the caller passes `safe_mode=False`, as
`keras.saving.load_model` does for `.keras` files (`refuse_pickled` makes
the same check alone, from the arrays' headers). `check_finite_rows` refuses
saved embeddings with NaN or infinite values, which an index never holds.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tensorflow_similarity import _atomic

# How many values check_finite_rows scans at once.
_CHUNK_ELEMENTS = 2**22


def write_npz(
    path: Path,
    arrays: Mapping[str, np.ndarray],
    *,
    kind: str,
    format_version: int,
    compression: bool = True,
) -> None:
    """Writes `arrays` with their `kind` and `format_version` to `path` atomically."""
    buffer = io.BytesIO()
    save = np.savez_compressed if compression else np.savez
    save(
        buffer,
        format_version=np.int64(format_version),
        kind=np.array(kind),
        **arrays,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic.write_bytes(path, buffer.getvalue())


def read_npz(
    path: Path,
    *,
    kind: str,
    format_version: int | Sequence[int],
    keys: Sequence[str],
    owner: str,
    optional: Sequence[str] = (),
    safe_mode: bool = True,
) -> dict[str, np.ndarray]:
    """Returns the arrays `keys` of a file written by `write_npz`, all in memory.

    Args:
        path: The file.
        kind: The `kind` the file must hold.
        format_version: The version the file must hold, or the versions
            it may hold (the one found is returned as `"format_version"`).
        keys: The arrays to read; each must be present.
        owner: The class reading, for the messages.
        optional: Arrays read too when present.
        safe_mode: If `True` (the default), an array of Python objects is
            refused before anything is unpickled. `False` unpickles it,
            which runs code the file names: only for files you trust.

    Returns:
        A dict from each key to its array (optional ones when present).

    Raises:
        FileNotFoundError: If `path` does not exist.
        ValueError: If the file is not a readable `.npz` of this `kind` and
            `format_version`, lacks one of `keys`, or (in safe mode) holds
            an array of Python objects.
    """
    if not path.is_file():
        raise FileNotFoundError(
            f"{owner}: no saved file at {str(path)!r}. Pass the folder given to save()."
        )
    versions = (format_version,) if isinstance(format_version, int) else tuple(format_version)
    try:
        with np.load(path, allow_pickle=False) as npz:
            found_version = int(npz["format_version"])
            found_kind = str(npz["kind"])
            if found_kind != kind or found_version not in versions:
                raise _WrongFormat(found_kind, found_version)
            wanted = [*keys, *(key for key in optional if key in npz.files)]
            pickled = [key for key in wanted if _holds_objects(npz, key)]
            if pickled and safe_mode:
                raise _Pickled(pickled)
            arrays = {key: np.array(npz[key]) for key in wanted if key not in pickled}
        if pickled:
            with np.load(path, allow_pickle=True) as npz:
                arrays.update({key: np.array(npz[key]) for key in pickled})
    except _Pickled as err:
        raise _pickled_error(path, err.keys[0], owner) from None
    except _WrongFormat as err:
        wanted = " or ".join(str(version) for version in versions)
        raise ValueError(
            f"{owner}: {str(path)!r} holds a {err.kind!r} file of format version "
            f"{err.version}; this version of {owner} reads {kind!r} files of format version "
            f"{wanted}. Save it again with the version that wrote it, or rebuild "
            "the index."
        ) from None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as err:
        raise ValueError(
            f"{owner}: {str(path)!r} is not a readable saved {kind} ({type(err).__name__}: "
            f"{err}). The file is corrupt or truncated; save the index again."
        ) from err
    if not isinstance(format_version, int):
        arrays["format_version"] = np.int64(found_version)
    return arrays


def refuse_pickled(path: Path, *, owner: str) -> None:
    """Raises `read_npz`'s safe-mode error if `path` holds an array stored pickled.

    Only the arrays' headers are read, so nothing is unpickled. A file that
    is missing or not a readable `.npz` passes: `read_npz` (or a checksum)
    reports it. A caller that checks a file's content before reading it
    calls this first, so that a file with pickled data is refused as such
    in safe mode whatever else is wrong with it.

    Args:
        path: The file.
        owner: The class that will read it, for the message.

    Raises:
        ValueError: If an array of the file is stored pickled.
    """
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return
    if not isinstance(npz, np.lib.npyio.NpzFile):
        return
    try:
        with npz:
            pickled = [key for key in npz.files if _holds_objects(npz, key)]
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return
    if pickled:
        raise _pickled_error(path, pickled[0], owner)


def check_finite_rows(rows: np.ndarray, file: Path, *, owner: str) -> None:
    """Raises unless every row of `rows`, embeddings read from `file`, is finite.

    The rows are scanned a chunk at a time, so a memory-mapped file is never
    read into memory whole.

    Args:
        rows: `[n, dim]` embeddings (an array or a `numpy.memmap`).
        file: The file they were read from, for the message.
        owner: The class reading them, for the message.

    Raises:
        ValueError: If a row holds NaN or an infinity.
    """
    width = int(np.prod(rows.shape[1:]))
    chunk = max(1, _CHUNK_ELEMENTS // max(1, width))
    bad, first = 0, None
    for start in range(0, len(rows), chunk):
        block = np.asarray(rows[start : start + chunk]).reshape(-1, width)
        bad_rows = np.flatnonzero(~np.isfinite(block).all(axis=1))
        if len(bad_rows) and first is None:
            first = start + int(bad_rows[0])
        bad += len(bad_rows)
    if bad:
        raise ValueError(
            f"{owner}: {str(file)!r} holds {bad} embeddings with NaN or infinite values (the "
            f"first is row {first}); an index holds only finite embeddings, so the file is "
            "corrupt. Save the index again, or re-index the examples."
        )


def _pickled_error(path: Path, key: str, owner: str) -> ValueError:
    return ValueError(
        f"{owner}: {str(path)!r} holds Python objects (array {key!r}), stored "
        "pickled; unpickling them runs whatever code the file names, so they are not "
        "loaded in safe mode. If you trust the file's source, load it with "
        "safe_mode=False; otherwise rebuild the index from your own data."
    )


def _holds_objects(npz: np.lib.npyio.NpzFile, key: str) -> bool:
    """Whether the array `key` of `npz` is stored pickled, read from its header alone.

    Raises:
        KeyError: If `npz` has no array `key`.
    """
    if key not in npz.files:
        raise KeyError(key)
    names = npz.zip.namelist()
    with npz.zip.open(key if key in names else f"{key}.npy") as member:
        version = np.lib.format.read_magic(member)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        _, _, dtype = read_header(member)
    return dtype.hasobject


class _Pickled(Exception):
    def __init__(self, keys: list[str]) -> None:
        super().__init__(keys)
        self.keys = keys


class _WrongFormat(Exception):
    def __init__(self, kind: str, version: int) -> None:
        super().__init__(kind, version)
        self.kind = kind
        self.version = version


def memory_mapped_rows(file: Path, owner: str, missing_hint: str) -> np.ndarray:
    """The raw rows saved in `file` (`.npy`), memory-mapped read-only (nothing read yet).

    Raises:
        FileNotFoundError: If `file` does not exist, ending with `missing_hint`.
        ValueError: If `file` is not a readable `.npy` (never unpickled).
    """
    try:
        return np.load(file, mmap_mode="r", allow_pickle=False)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{owner}: no saved embeddings at {str(file)!r}. {missing_hint}"
        ) from None
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{owner}: {str(file)!r} is not a readable .npy of embeddings ({err}). The file is "
            "corrupt or truncated; save the index again."
        ) from err
