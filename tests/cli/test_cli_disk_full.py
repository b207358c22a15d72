"""A full disk while tfsim saves ends as `tfsim: error:` naming the file and the space left."""

from __future__ import annotations

import errno

import pytest

from tensorflow_similarity.cli.disk_full import disk_full_is_usage_error
from tensorflow_similarity.cli.errors import UsageError


def test_a_full_disk_is_a_usage_error_naming_the_file_and_the_free_space(tmp_path):
    with pytest.raises(UsageError, match=r"disk is full.*model.keras.*MiB free"):
        with disk_full_is_usage_error(tmp_path):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "model.keras"))


def test_h5pys_full_disk_message_is_recognised(tmp_path):
    with pytest.raises(UsageError, match="MiB free"):
        with disk_full_is_usage_error(tmp_path):
            raise OSError("Unable to synchronously write data (file write failed: errno = 28)")


def test_other_os_errors_are_left_alone(tmp_path):
    with pytest.raises(PermissionError):
        with disk_full_is_usage_error(tmp_path):
            raise PermissionError(errno.EACCES, "Permission denied")


def test_a_backup_that_cannot_fit_is_named_with_the_command_that_resumes(tmp_path):
    backup = tmp_path / "backup" / "latest.weights.h5"
    then = f"tfsim pretrain --output {tmp_path} --resume"
    refused = OSError(
        errno.ENOSPC,
        f"Backing up epoch 2 to {str(backup)!r} needs about 1.0 MiB (0.5 MiB free on that "
        "disk); the previous backup there (if any) is unchanged. Free space, then resume from it",
    )
    with pytest.raises(UsageError) as error:
        with disk_full_is_usage_error(tmp_path / "backup", then=then):
            raise refused
    assert str(error.value) == f"the disk is full: {refused.strerror}: {then}"
