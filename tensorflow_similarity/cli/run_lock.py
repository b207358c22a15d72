"""The lock that keeps one `tfsim` run at a time in an `--output` folder.

A run's chief creates `.tfsim.lock` in `--output` before it builds a model
or loads data, atomically (`O_CREAT | O_EXCL`), with its pid, host name and
start time, and deletes it when it ends, on error too. A second run finds the
lock and is refused, naming the process that holds it. A lock left by a
process that was killed (its pid is no longer alive on this host) is stale:
it is named on stderr and taken over. A lock from another host cannot be
checked from here, and is refused with the command that deletes it.

The lock file is not one of a run's files (`run_folder.RUN_FILES`): it is
neither a foreign file to the folder checks nor part of a run's
fingerprints, and `--overwrite` leaves it to its owner.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from tensorflow_similarity.cli.errors import UsageError

LOCK_FILE = ".tfsim.lock"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Another user's live process.
        return True
    except (OverflowError, ValueError):
        return False
    return True


def _read(path: Path) -> dict[str, Any] | None:
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return holder if isinstance(holder, dict) else None


def _holder_words(holder: dict[str, Any]) -> str:
    if not holder:
        return "its lock file was left empty"
    return (
        f"pid {holder.get('pid')} on host {holder.get('host')!r}, started "
        f"{holder.get('started', 'at an unknown time')}"
    )


def _stale(path: Path) -> dict[str, Any] | None:
    """The holder of the stale lock at `path` (`{}` if unreadable, `None` if gone).

    Raises:
        UsageError: If a live run holds it, or one on another host.
    """
    holder = _read(path)
    if holder is None:
        # Written right after its atomic creation: an empty lock is being written, or its
        # writer was killed in between; a few seconds tell the two apart.
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return None
        if age > 10:
            return {}
        raise UsageError(
            f"--output {str(path.parent)!r} is in use: another tfsim run is starting there "
            f"({path.name} is being written). Wait for it to end, or give another --output."
        )
    pid, host = holder.get("pid"), holder.get("host")
    if host == socket.gethostname() and isinstance(pid, int) and not _pid_alive(pid):
        return holder
    if host == socket.gethostname():
        raise UsageError(
            f"--output {str(path.parent)!r} is in use by another tfsim run "
            f"({_holder_words(holder)}); two runs in one folder would mix their files. Wait "
            "for it to end, stop it, or give another --output."
        )
    raise UsageError(
        f"--output {str(path.parent)!r} is in use by a tfsim run on another host "
        f"({_holder_words(holder)}), which cannot be checked from here. Give another "
        f"--output; if that run is gone, delete the lock: rm {path}"
    )


def check_not_in_use(output: Path) -> None:
    """Raises `UsageError` if a live run holds the lock of `output` (reads only).

    Called before the folder checks, so that a folder in use is refused as
    such rather than as a folder holding a run.
    """
    path = output / LOCK_FILE
    if path.is_file():
        _stale(path)


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
        self.held = False

    def acquire(self) -> None:
        """Creates the lock file, taking over a stale one.

        Raises:
            UsageError: If another live run holds the lock, or the lock
                cannot be created.
        """
        for _ in range(3):
            try:
                descriptor = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = _stale(self.path)
                if holder is not None:
                    print(
                        f"tfsim: warning: taking over the stale lock {str(self.path)!r} of a "
                        f"run that is gone ({_holder_words(holder)}).",
                        file=sys.stderr,
                        flush=True,
                    )
                self.path.unlink(missing_ok=True)
                continue
            except OSError as error:
                raise UsageError(
                    f"cannot create the lock {str(self.path)!r} ({error.strerror or error}); "
                    "choose a folder you can write to."
                ) from None
            holder = {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            with os.fdopen(descriptor, "w") as file:
                json.dump(holder, file)
            self.held = True
            return
        raise UsageError(
            f"--output {str(self.path.parent)!r} is in use: other tfsim runs keep taking its "
            "lock. Give another --output."
        )

    def release(self) -> None:
        """Deletes the lock file if this process still holds it."""
        if not self.held:
            return
        self.held = False
        holder = _read(self.path)
        if holder is not None and holder.get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()
