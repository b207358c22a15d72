"""The `tfsim` command's entry point: quiets TensorFlow's C++ log, then runs the command.

TensorFlow reads `TF_CPP_MIN_LOG_LEVEL` once, while it is imported, and its
libraries print their start-up lines (oneDNN, and absl's note that messages
before `absl::InitializeLog()` go to stderr) during that import whatever the
level. `tensorflow_similarity` imports TensorFlow in its `__init__`, so the
quieting must run before the package is imported, which is why this module
lives outside it: the `tfsim` console script and `python -m tfsim` run
`main`, which sets the level, imports TensorFlow with those lines filtered
out of stderr, and only then imports the package and runs the command.

Importing `tensorflow_similarity` changes nothing in the process (no
environment variable, no file descriptor): `python -m tensorflow_similarity`
runs the same command with TensorFlow's log as TensorFlow prints it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence

LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
# 3: errors too. They reach the user as Python exceptions; `--verbose` shows everything.
QUIET_LOG_LEVEL = "3"
# A glog/absl line ("W0000 00:00:1796115260.365105   16548 file.cc:699] ...") or absl's
# pre-initialisation notice.
LOG_LINE = re.compile(
    r"^(?:[IWEF]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called)"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the `tfsim` command with TensorFlow's start-up log hidden (see `quiet_tensorflow_log`).

    Args:
        argv: Command-line arguments without the program name. Defaults to
            `sys.argv[1:]`.

    Returns:
        The command's exit status (see `tensorflow_similarity.cli.main`).
    """
    arguments = sys.argv[1:] if argv is None else list(argv)
    quiet_tensorflow_log(arguments)
    # Imported here, not at the top: the package imports TensorFlow, which must come after
    # quiet_tensorflow_log has set the log level.
    from tensorflow_similarity.cli import main as run_command

    return run_command(arguments)


def wants_log(arguments: Sequence[str]) -> bool:
    """Whether `arguments` ask for TensorFlow's log: `--verbose`, or a prefix argparse accepts."""
    return any(len(a) >= 3 and "--verbose".startswith(a) for a in arguments)


def quiet_tensorflow_log(arguments: Sequence[str]) -> None:
    """Hides TensorFlow's C++ log unless the user chose to see it.

    Sets `TF_CPP_MIN_LOG_LEVEL` to 3 and imports TensorFlow with the start-up
    lines its libraries print before that level applies filtered out of
    stderr. Does nothing when `arguments` hold `--verbose`,
    `TF_CPP_MIN_LOG_LEVEL` is set, or TensorFlow is already imported.

    Args:
        arguments: The command's arguments, without the program name.
    """
    if wants_log(arguments) or LOG_LEVEL_VARIABLE in os.environ or "tensorflow" in sys.modules:
        return
    os.environ[LOG_LEVEL_VARIABLE] = QUIET_LOG_LEVEL
    with _log_lines_filtered():
        # The process's first import of TensorFlow, made here so that it is filtered.
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


if __name__ == "__main__":
    raise SystemExit(main())
