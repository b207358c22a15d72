"""The errors that end a `tfsim` command without a traceback, and the exit status of each."""

from __future__ import annotations

from tensorflow_similarity.callbacks.stop_on_non_finite import TrainingDiverged

# Bad input, reported before any work starts (argparse's own status).
EXIT_USAGE = 2
# Training stopped on a non-finite loss or weight.
EXIT_DIVERGED = 3
# --strategy multi-worker: the cluster did not form within --worker-timeout, or lost a task.
EXIT_CLUSTER = 4
# Ctrl-C or SIGTERM: 128 + SIGINT, as a shell reports a process it interrupted.
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad input: reported as `tfsim: error: <message>`, exit status 2, no traceback."""


class ClusterError(Exception):
    """A multi-worker cluster that did not form: `tfsim: error: <message>`, exit status 4."""


__all__ = [
    "ClusterError",
    "EXIT_CLUSTER",
    "EXIT_DIVERGED",
    "EXIT_INTERRUPTED",
    "EXIT_USAGE",
    "TrainingDiverged",
    "UsageError",
]
