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
