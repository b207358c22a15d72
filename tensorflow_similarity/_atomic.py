"""Writes that land whole or not at all: files and folders switched in by renaming.

A file is written to a sibling, flushed to disk (`fsync`) and renamed over
its destination (`os.replace`, atomic on one filesystem), then the folder
holding it is flushed, so after a crash at any moment the destination holds
the old content or the new, whole.

`os.replace` cannot replace a non-empty folder, so a folder is switched in
three renames, each flushed: the new content is written into the staging
sibling `.NAME.partial`, the destination is renamed to the backup sibling
`.NAME.old`, the staging folder to the destination, and the backup is
deleted. A crash leaves one of these states, each of which a reader and the
next writer resolve the same way (`readable_dir`, `recover_dir`): the
destination alone (the old save, or the new one once switched); the
destination and a partial staging folder (the old save: the staging folder
is discarded); the backup alone (the old save, between the first two
renames); the destination and the backup (the new save, once its staging
folder was renamed in: the backup is discarded).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

# Files are read this many bytes at a time to hash them.
_HASH_CHUNK = 2**24


def staging_path(path: str | Path) -> Path:
    """The sibling a new version of `path` is written to before it is switched in.

    A file keeps its suffix (`model.keras` -> `.model.partial.keras`: Keras
    writes only names ending in `.keras`); a folder gets `.NAME.partial`.
    """
    path = Path(path)
    if path.suffix:
        return path.with_name(f".{path.stem}.partial{path.suffix}")
    return path.with_name(f".{path.name}.partial")


def backup_path(path: str | Path) -> Path:
    """The sibling a folder is renamed to while its new version is switched in."""
    path = Path(path)
    return path.with_name(f".{path.name}.old")


def fsync_file(path: str | Path) -> None:
    """Flushes the content of the file `path` to disk."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: str | Path) -> None:
    """Flushes the entries of the folder `path` (its renames) to disk, where the OS can."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:  # Windows cannot open a folder; its renames are durable already.
        return
    try:
        os.fsync(handle)
    except OSError:
        pass  # Some filesystems (and Windows) refuse to fsync a folder.
    finally:
        os.close(handle)


def fsync_tree(path: str | Path) -> None:
    """Flushes every file under the folder `path`, then every folder, deepest first."""
    folders = []
    for root, _, files in os.walk(path):
        for name in files:
            fsync_file(Path(root) / name)
        folders.append(root)
    for folder in reversed(folders):
        fsync_dir(folder)


def replace_file(source: str | Path, destination: str | Path) -> None:
    """Flushes `source` and renames it over `destination`, then flushes their folder."""
    fsync_file(source)
    os.replace(source, destination)
    fsync_dir(Path(destination).parent)


def write_bytes(path: str | Path, content: bytes) -> None:
    """Writes `content` to the file `path` atomically (see the module)."""
    path = Path(path)
    partial = staging_path(path)
    try:
        with open(partial, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        replace_file(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    """Writes `text` (UTF-8) to the file `path` atomically (see the module)."""
    write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def writing_file(path: str | Path) -> Iterator[Path]:
    """Yields the staging sibling of the file `path`, switched in when the block succeeds.

    The block writes the file it is given; on success it is flushed and
    renamed over `path`; on any error it is deleted and `path` is untouched.
    """
    path = Path(path)
    partial = staging_path(path)
    partial.unlink(missing_ok=True)
    try:
        yield partial
        replace_file(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def recover_dir(path: str | Path) -> None:
    """Resolves a folder switch a crash interrupted, as `readable_dir` reads it.

    Called before a new save: the backup is renamed back if the destination
    is missing (the old save), and otherwise deleted (the switch was done);
    a staging folder is deleted (never switched in).
    """
    path = Path(path)
    old, new = backup_path(path), staging_path(path)
    if old.is_dir() and not path.exists():
        if any(old.iterdir()):
            os.rename(old, path)
            fsync_dir(path.parent)
        else:
            old.rmdir()
    if old.exists():
        shutil.rmtree(old)
    if new.exists():
        shutil.rmtree(new)


def readable_dir(path: str | Path) -> Path:
    """The folder that holds the save at `path`: `path`, or its backup mid-switch."""
    path = Path(path)
    old = backup_path(path)
    if not path.exists() and old.is_dir():
        return old
    return path


def switch_dir(staged: str | Path, path: str | Path) -> Path:
    """Renames the complete folder `staged` to `path`, keeping the old one as its backup.

    The content of `staged` is flushed first. An empty backup is made when
    there was no old folder, so that a reader can tell a switch in progress.

    Returns:
        The backup, for the caller to delete (`discard_dir`) once whatever
        depends on the old folder has been switched too.
    """
    staged, path = Path(staged), Path(path)
    fsync_tree(staged)
    old = backup_path(path)
    if path.exists():
        os.rename(path, old)
    else:
        old.mkdir()
    fsync_dir(path.parent)
    os.rename(staged, path)
    fsync_dir(path.parent)
    return old


def discard_dir(path: str | Path) -> None:
    """Deletes the folder `path` (a backup or a staging folder) if it exists."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
        fsync_dir(path.parent)


def sha256_file(path: str | Path, length: int | None = None) -> str:
    """The hex SHA-256 of the file `path`, or of its first `length` bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        remaining = os.fstat(handle.fileno()).st_size if length is None else length
        while remaining:
            block = handle.read(min(remaining, _HASH_CHUNK))
            if not block:
                break
            digest.update(block)
            remaining -= len(block)
    return digest.hexdigest()
