"""Where an export lands: the checks on its folder, its lock, and the switch that puts it there.

An export is written whole into a private staging folder beside its
destination `OUT` (`.OUT.partial-HOST-PID-XXXX`, unique to the process),
then switched in under an exclusive lock on `OUT` (`.OUT.lock` beside it,
held with `flock`, which the system releases when its holder dies): the
destination is checked again, the old export renamed to `.OUT.old`, the new
one renamed to `OUT`, and the old one deleted. Two exports to one `OUT`
therefore never share a folder: each lands whole, one after the other, or
the later one is refused when `OUT` appeared meanwhile and it may not
overwrite it.

A process killed between the two renames leaves `.OUT.old` and no `OUT`;
the next export (or `check_destination`) renames it back before anything
else, so that `OUT` is the old export again, and deletes the staging
folders of processes that are gone.

`--overwrite` (`overwrite=True`) replaces only an export this package
wrote: a folder whose `serving.json` says so and holds nothing but the
files that export listed, or an empty folder. Anything else, and a symbolic
link, is refused and left as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tensorflow_similarity import _atomic

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

# Written beside saved_model.pb: what was exported, for people and for `overwrite`.
MANIFEST = "serving.json"
# The manifest's `written_by`: what marks a folder as an export `overwrite` may replace.
WRITTEN_BY = "tensorflow_similarity.serving.export_model"


def manifest_entry(files: list[str]) -> dict[str, object]:
    """The manifest keys that mark an export as this package's: its writer and its files."""
    return {"written_by": WRITTEN_BY, "files": sorted(files)}


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


def staging_dir(path: Path) -> Path:
    """Creates and returns a new private staging folder beside `path`.

    Its name, `.NAME.partial-HOST-PID-XXXX`, names the process writing it,
    so that a later export deletes it once that process is gone.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}.partial-{_host()}-{os.getpid()}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=path.parent))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Another user's live process.
        return True
    except (OverflowError, ValueError, OSError):
        return False
    return True


def _remove(path: Path) -> None:
    """Deletes a folder, or only the link when `path` is a symbolic link."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _recover(path: Path) -> None:
    """Resolves what an interrupted export left beside `path` (hold the lock).

    The backup `.NAME.old` is renamed back when `path` is missing (a kill
    between the two renames: the old export, or the old link), and deleted
    otherwise (the switch was done); the staging folders of processes gone
    from this host, and the shared one of earlier versions, are deleted.
    """
    old = _atomic.backup_path(path)
    if old.is_symlink() or old.exists():
        if not (path.is_symlink() or path.exists()):
            if old.is_dir() and not old.is_symlink() and not any(old.iterdir()):
                old.rmdir()  # An export switched in where there was none: nothing to restore.
            else:
                os.rename(old, path)
            _atomic.fsync_dir(path.parent)
        else:
            _remove(old)
    legacy = _atomic.staging_path(path)
    if legacy.is_symlink() or legacy.exists():
        _remove(legacy)
    pattern = re.compile(rf"\.{re.escape(path.name)}\.partial-(.+)-(\d+)-[^-]+")
    for sibling in path.parent.iterdir() if path.parent.is_dir() else ():
        match = pattern.fullmatch(sibling.name)
        if match and match.group(1) == _host() and not _pid_alive(int(match.group(2))):
            _remove(sibling)


@contextlib.contextmanager
def destination_lock(path: Path) -> Iterator[None]:
    """Holds the exclusive lock of the export destination `path` (`.NAME.lock` beside it).

    Blocks while another export holds it. The lock file is deleted on
    release; a waiter that locked a file deleted meanwhile locks the new one.
    """
    lock = path.parent / f".{path.name}.lock"
    while True:
        handle = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_EX)
            else:
                msvcrt.locking(handle, msvcrt.LK_LOCK, 1)
            try:
                same = os.fstat(handle).st_ino == os.stat(lock).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(handle)
            raise
        if same:
            break
        os.close(handle)
    try:
        yield
    finally:
        if fcntl is not None:  # Windows cannot delete an open file: the lock file stays.
            lock.unlink(missing_ok=True)
        os.close(handle)


def check_destination(path: Path, overwrite: bool) -> None:
    """Raises `FileExistsError` unless an export may be written to `path`.

    Under the lock of `path`, first puts back an export that an interrupted
    switch left as `.NAME.old`, and deletes the staging folders of exports
    whose process is gone (see the module). Then a path that does not exist
    may be written; an existing one only with `overwrite`, and only if it is
    an empty folder or an export this package wrote that holds nothing
    else (its `serving.json` names its files). A symbolic link is refused:
    the switch would replace the link, not the folder it points to.

    Args:
        path: The export's folder.
        overwrite: Whether an earlier export there may be replaced.

    Raises:
        FileExistsError: If `path` may not be written, saying why and what to do.
    """
    path = Path(path)
    if path.parent.is_dir():
        with destination_lock(path):
            _recover(path)
    _check(path, overwrite)


def _check(path: Path, overwrite: bool) -> None:
    shown = repr(str(path))
    if path.is_symlink():
        raise FileExistsError(
            f"{shown} is a symbolic link (to {os.readlink(path)!r}): an export replaces its "
            "folder by renaming, which would replace the link, not the folder it points to. "
            f"Give the folder itself ({str(path.resolve())!r}), or another path; nothing was "
            "written."
        )
    if not path.exists():
        return
    if not overwrite:
        raise FileExistsError(
            f"{shown} exists; nothing was written. Give another path, or overwrite=True "
            "(tfsim export --overwrite) to replace an earlier export."
        )
    if not path.is_dir():
        raise FileExistsError(f"{shown} is a file, not an earlier export: it is never overwritten.")
    entries = sorted(entry.name for entry in path.iterdir())
    if not entries:
        return
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict) or manifest.get("written_by") != WRITTEN_BY:
        raise FileExistsError(
            f"{shown} exists and is not an export tensorflow_similarity wrote (no {MANIFEST} "
            "that says so): it is never overwritten. Give another path, or move it away."
        )
    others = [name for name in entries if name not in set(manifest.get("files") or [])]
    if others:
        raise FileExistsError(
            f"{shown} holds files its export did not write ({', '.join(others[:4])}"
            f"{', ...' if len(others) > 4 else ''}): they are never deleted, so it is not "
            "overwritten. Move them away, or give another path."
        )


def switch_in(staged: Path, path: Path, overwrite: bool) -> None:
    """Switches the complete export `staged` in at `path`, under the lock of `path`.

    `path` is checked again under the lock (another export may have written
    it meanwhile); the old export is deleted once the new one is in place.
    On an error between the renames, the old export is put back.

    Raises:
        FileExistsError: If `path` may no longer be written (`staged` is left
            to the caller).
    """
    with destination_lock(path):
        _recover(path)
        _check(path, overwrite)
        try:
            old = _atomic.switch_dir(staged, path)
        except BaseException:
            _recover(path)
            raise
        _remove(old)
        _atomic.fsync_dir(path.parent)
