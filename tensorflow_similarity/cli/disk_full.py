"""A full disk while a run writes its files ends as `tfsim: error:`, not as a traceback."""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Iterator
from pathlib import Path

from tensorflow_similarity.cli.errors import UsageError


def is_disk_full(error: BaseException) -> bool:
    """Whether `error` (or an error it was raised from) says the disk is full."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        # h5py reports a failed write as a bare OSError whose text holds the errno.
        if "No space left on device" in str(error) or "errno = 28" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def disk_full_is_usage_error(folder: Path | None = None, then: str = "") -> Iterator[None]:
    """Turns a full disk in the block into a `UsageError` naming the file and the space left.

    The library's saves say which file failed and that the previous save is
    kept (`IndexMixin.save`, `EpochBackup`, which checks the space before
    h5py writes); any other full-disk error is named with the free space of
    `folder`.

    Args:
        folder: The folder being written, for the free space. Defaults to
            the one the error names, else the current folder.
        then: The command that goes on once space is freed, appended to the
            message. Defaults to none.
    """
    try:
        yield
    except OSError as error:
        if not is_disk_full(error):
            raise
        if "free on that disk" in str(error):
            message = error.strerror or str(error)
        else:
            where = Path(error.filename or folder or ".")
            while not where.exists() and where != where.parent:
                where = where.parent
            free = shutil.disk_usage(where).free / 2**20
            message = (
                f"writing {str(error.filename or folder)!r} failed: no space left on the disk "
                f"({free:.1f} MiB free there). Free space and train again"
            )
        raise UsageError(f"the disk is full: {message}{': ' + then if then else ''}") from None
