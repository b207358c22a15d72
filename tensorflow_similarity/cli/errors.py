"""The error of bad `tfsim` input."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input: reported as `tfsim: error: <message>`, exit status 2, no traceback."""
