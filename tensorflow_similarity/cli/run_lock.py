"""The lock that keeps one `tfsim` run at a time in an `--output` folder.

A run's chief holds an operating-system lock (`flock`, exclusive) on
`.tfsim.lock` in `--output` from before it builds a model or loads data until
it ends; the file records its pid, host name and start time, for the
messages. The operating system releases the lock when its process ends,
however it ends (killed included), so the lock itself says whether a run is
alive: a recorded pid decides nothing, and a restarted container whose run
has the pid of the killed one (pid 1, say) takes its lock over. A second run
finds the lock held and is refused, naming the run that holds it.

The file exists only while a run holds it: the holder deletes it at its end,
still holding the lock. A process that locked a file since deleted (it
opened it just before) sees that the file it holds is no longer the lock and
locks the new one, so two processes never hold the lock together, however
many take it over at once. A lock file that no process holds was left by a
killed run (or by a tfsim that did not use this lock): if it names a process
of this host it is stale, named on stderr and taken over; if it names another
host it is refused with the command that deletes it, since a lock on a
network filesystem may not reach across hosts. Anything but a regular file
at `.tfsim.lock` (a folder, a link) is refused.

Whether a run holds the lock is read with a shared lock held for an instant
(`holder_of`); a run that finds the lock taken retries for a moment before
it refuses, so that such a reader never makes a run refuse.

The lock file is not one of a run's files (`run_folder.RUN_FILES`): it is
neither a foreign file to the folder checks nor part of a run's
fingerprints, and `--overwrite` leaves it to its owner.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

from tensorflow_similarity.cli.errors import UsageError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

LOCK_FILE = ".tfsim.lock"
# Windows locks byte ranges, and a locked byte cannot be read: its lock is a byte past the record.
_WINDOWS_LOCK_BYTE = 1 << 30
# How long a run retries a lock held by someone else: long enough to outlast a reader of the
# lock (`holder_of` holds it for microseconds), far shorter than any run.
_RETRY_SECONDS = 0.25
_RETRY_STEP = 0.005


def _open(path: Path, create: bool) -> int | None:
    """A descriptor of the lock file (`None` if absent and not `create`d).

    Raises:
        UsageError: If something else than a regular file is at `path`, or it
            cannot be opened or created.
    """
    # Reading whether a run holds it needs no write access (`lookup` of another user's run).
    flags = (os.O_RDWR | os.O_CREAT) if create else os.O_RDONLY
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags, 0o644)
    except FileNotFoundError:
        if create:
            raise UsageError(
                f"cannot create the lock {str(path)!r}: its folder does not exist."
            ) from None
        return None
    except OSError as error:
        if error.errno in (errno.EISDIR, errno.ELOOP):
            _refuse_not_a_file(path)
        raise UsageError(
            f"cannot {'create' if create else 'open'} the lock {str(path)!r} "
            f"({error.strerror or error}); choose a folder you can write to."
        ) from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        _refuse_not_a_file(path)
    return descriptor


def _refuse_not_a_file(path: Path) -> None:
    kind = "a symbolic link" if path.is_symlink() else "a folder" if path.is_dir() else "not a file"
    raise UsageError(
        f"{str(path)!r} is {kind}, not a tfsim lock file: tfsim keeps one run at a time in "
        f"--output {str(path.parent)!r} with a lock file of that name. Remove it, or give "
        "another --output."
    )


def _try_lock(descriptor: int, path: Path, exclusive: bool) -> bool:
    """Takes the lock of `descriptor` without waiting; `False` if another holds it."""
    try:
        if fcntl is not None:
            fcntl.flock(descriptor, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        else:
            os.lseek(descriptor, _WINDOWS_LOCK_BYTE, os.SEEK_SET)
            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
    except BlockingIOError:
        return False
    except OSError as error:
        if fcntl is None and error.errno in (errno.EACCES, errno.EDEADLOCK):
            return False
        raise UsageError(
            f"cannot lock {str(path)!r} ({error.strerror or error}): its filesystem does not "
            "support locks. Give an --output on a local disk."
        ) from None
    return True


def _is_current(descriptor: int, path: Path) -> bool:
    """Whether `descriptor` is still the file at `path` (not deleted or replaced since)."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(descriptor)
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)


def _record(descriptor: int) -> dict[str, Any]:
    """The holder the lock file records (`{}` if empty or unreadable)."""
    try:
        os.lseek(descriptor, 0, os.SEEK_SET)
        text = os.read(descriptor, os.fstat(descriptor).st_size)
        holder = json.loads(text) if text else {}
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def holder_words(holder: dict[str, Any]) -> str:
    """Names the run a lock file records: `"pid 12 on host 'h', started 2026-..."`."""
    if not holder:
        return "starting: its lock file is being written"
    return (
        f"pid {holder.get('pid')} on host {holder.get('host')!r}, started "
        f"{holder.get('started', 'at an unknown time')}"
    )


def _in_use(path: Path, holder: dict[str, Any]) -> UsageError:
    """The error for a lock that a live run holds."""
    if not holder:
        # Locked, not yet written: its holder took it an instant ago.
        return UsageError(
            f"--output {str(path.parent)!r} is in use: another tfsim run is starting there "
            f"({path.name} is being written). Wait for it to end, or give another --output."
        )
    return UsageError(
        f"--output {str(path.parent)!r} is in use by another tfsim run "
        f"({holder_words(holder)}); two runs in one folder would mix their files. Wait "
        "for it to end, stop it, or give another --output."
    )


def _check_same_host(path: Path, holder: dict[str, Any]) -> None:
    """Raises `UsageError` for a free lock that another host's run left."""
    host = holder.get("host")
    if holder and host is not None and host != socket.gethostname():
        raise UsageError(
            f"--output {str(path.parent)!r} is in use by a tfsim run on another host "
            f"({holder_words(holder)}), which cannot be checked from here. Give another "
            f"--output; if that run is gone, delete the lock: rm {path}"
        )


def holder_of(output: Path) -> dict[str, Any] | None:
    """The run that holds the lock of `output`: what its lock file records, `None` if none.

    Reads only: it holds a shared lock for an instant and never creates or
    deletes the file.

    Args:
        output: A run's folder.

    Returns:
        `{"pid", "host", "started"}` of the live run holding the lock (`{}`
        while it is being written), or `None` if no run holds it.

    Raises:
        UsageError: If something else than a regular file is at the lock's
            path.
    """
    path = Path(output) / LOCK_FILE
    descriptor = _open(path, create=False) if os.path.lexists(path) else None
    if descriptor is None:
        return None
    try:
        if _try_lock(descriptor, path, exclusive=False):
            return None
        return _record(descriptor)
    finally:
        os.close(descriptor)


def check_not_in_use(output: Path) -> None:
    """Raises `UsageError` if a live run holds the lock of `output` (reads only).

    Called before the folder checks, so that a folder in use is refused as
    such rather than as a folder holding a run. A free lock that another
    host's run left is refused too (see the module).
    """
    path = Path(output) / LOCK_FILE
    holder = holder_of(output)
    if holder is not None:
        raise _in_use(path, holder)
    descriptor = _open(path, create=False) if os.path.lexists(path) else None
    if descriptor is not None:
        try:
            _check_same_host(path, _record(descriptor))
        finally:
            os.close(descriptor)


class RunLock:
    """The lock of one run's `--output` folder (see the module).

    Args:
        output: The run's folder, which must exist.

    Example:

    ```python
    with RunLock(Path("tfsim-output")):
        ...  # train; a second run on the folder is refused meanwhile
    ```
    """

    def __init__(self, output: Path) -> None:
        self.path = Path(output) / LOCK_FILE
        self._descriptor: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._descriptor is not None

    def acquire(self) -> None:
        """Takes the lock, taking over a stale one; records this process in its file.

        Raises:
            UsageError: If another live run holds the lock, a run of another
                host left it, or something else than a regular file is at its
                path, or it cannot be created.
        """
        deadline = time.monotonic() + _RETRY_SECONDS
        while True:
            descriptor = _open(self.path, create=True)
            try:
                if self._take(descriptor):
                    descriptor = None
                    return
            finally:
                if descriptor is not None:
                    os.close(descriptor)
            if time.monotonic() > deadline:
                raise UsageError(
                    f"--output {str(self.path.parent)!r} is in use: other tfsim runs keep "
                    "taking its lock. Give another --output."
                )

    def _take(self, descriptor: int) -> bool:
        """Takes the lock through `descriptor`; `False` to try again with a new descriptor."""
        deadline = time.monotonic() + _RETRY_SECONDS
        while not _try_lock(descriptor, self.path, exclusive=True):
            if time.monotonic() > deadline:
                raise _in_use(self.path, _record(descriptor))
            time.sleep(_RETRY_STEP)
        if not _is_current(descriptor, self.path):
            # Its holder deleted it as it ended; the next run's lock is a new file.
            return False
        holder = _record(descriptor)
        _check_same_host(self.path, holder)
        if holder:
            print(
                f"tfsim: warning: taking over the stale lock {str(self.path)!r} of a run that "
                f"is gone ({holder_words(holder)}).",
                file=sys.stderr,
                flush=True,
            )
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(descriptor, 0)
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, json.dumps(record).encode())
        self._descriptor = descriptor
        return True

    def release(self) -> None:
        """Deletes the lock file and releases the lock, if this object holds it."""
        descriptor, self._descriptor = self._descriptor, None
        if descriptor is None:
            return
        try:
            # Emptied, then deleted, while still locked: a run that opened it meanwhile sees it
            # is gone (where it cannot be deleted, Windows, the next run finds it empty).
            os.ftruncate(descriptor, 0)
            if _is_current(descriptor, self.path):
                self.path.unlink()
        except OSError:
            pass
        finally:
            os.close(descriptor)

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
