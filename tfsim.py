"""Keeps TensorFlow's C++ log off the screen of the `tfsim` command.

TensorFlow reads `TF_CPP_MIN_LOG_LEVEL` once, while it is imported, and its
libraries print their start-up lines (oneDNN, and absl's note that messages
before `absl::InitializeLog()` go to stderr) during that import whatever the
level. The package imports TensorFlow in its `__init__`, which runs before any
module of `tensorflow_similarity.cli` can, so the command is recognised here,
from the process's arguments, and `tensorflow_similarity/__init__.py` calls
`quiet_tensorflow_log` before anything imports TensorFlow. Python callers of
the package are left alone: their process is not the command.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
# 3: errors too. They reach the user as Python exceptions; `--verbose` shows everything.
QUIET_LOG_LEVEL = "3"
_MODULE = "tensorflow_similarity"
# Interpreter options that take a value (`python -X importtime -m ...`).
_OPTIONS_WITH_VALUE = ("-X", "-W", "--check-hash-based-pycs")
# A glog/absl line ("W0000 00:00:1796115260.365105   16548 file.cc:699] ...") or absl's
# pre-initialisation notice.
LOG_LINE = re.compile(
    r"^(?:[IWEF]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called)"
)


def command_arguments(argv: Sequence[str], orig_argv: Sequence[str]) -> list[str] | None:
    """Returns the `tfsim` command's arguments if this process is the command.

    Args:
        argv: `sys.argv`.
        orig_argv: `sys.orig_argv` (the interpreter's own arguments).

    Returns:
        The arguments after the program name for the `tfsim` console script
        or `python -m tensorflow_similarity`, else `None`.
    """
    if argv and Path(argv[0]).stem in ("tfsim", "tfsim-script"):
        return list(argv[1:])
    tokens = list(orig_argv[1:])
    while tokens:
        token = tokens.pop(0)
        if token in _OPTIONS_WITH_VALUE:
            tokens = tokens[1:]
        elif token == "-m":
            return tokens[1:] if tokens[:1] == [_MODULE] else None
        elif token == f"-m{_MODULE}":
            return tokens
        elif not token.startswith("-") or token.startswith("-c") or token.startswith("-m"):
            return None
    return None


def wants_log(arguments: Sequence[str]) -> bool:
    """Whether `arguments` ask for TensorFlow's log: `--verbose`, or a prefix argparse accepts."""
    return any(len(a) >= 3 and "--verbose".startswith(a) for a in arguments)


def quiet_tensorflow_log() -> None:
    """Hides TensorFlow's C++ log if this process is `tfsim` and the user did not choose.

    Sets `TF_CPP_MIN_LOG_LEVEL` to 3 and imports TensorFlow with the start-up
    lines its libraries print before that level applies filtered out of
    stderr. Does nothing when the process is not the `tfsim` command,
    `--verbose` is given, `TF_CPP_MIN_LOG_LEVEL` is set, or TensorFlow is
    already imported.
    """
    arguments = command_arguments(sys.argv, getattr(sys, "orig_argv", sys.argv))
    if (
        arguments is None
        or wants_log(arguments)
        or LOG_LEVEL_VARIABLE in os.environ
        or "tensorflow" in sys.modules
    ):
        return
    os.environ[LOG_LEVEL_VARIABLE] = QUIET_LOG_LEVEL
    with _log_lines_filtered():
        # The package's first import of TensorFlow, made here so that it is filtered.
        import tensorflow  # noqa: F401


@contextlib.contextmanager
def _log_lines_filtered() -> Iterator[None]:
    """Holds what is written to file descriptor 2 and re-writes all but log lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not LOG_LINE.match(line)))
            sys.stderr.flush()
