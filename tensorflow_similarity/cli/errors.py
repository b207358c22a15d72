"""The errors that end a `tfsim` command without a traceback, and the exit status of each."""

from __future__ import annotations

# Bad input, reported before any work starts (argparse's own status).
EXIT_USAGE = 2
# Training stopped on a non-finite loss or weight.
EXIT_DIVERGED = 3
# Ctrl-C or SIGTERM: 128 + SIGINT, as a shell reports a process it interrupted.
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad input: reported as `tfsim: error: <message>`, exit status 2, no traceback."""


class TrainingDiverged(Exception):
    """Training produced a non-finite loss or weight: exit status `EXIT_DIVERGED`.

    Raised by `fitting.StopOnNonFinite` as soon as it sees one, so that
    nothing of the diverged epoch is saved (no backup, no model.keras).

    Args:
        what: What became non-finite, e.g. `"the loss became nan"`.
        epoch: The epoch it happened in, counted from 1.
        step: The step of that epoch, counted from 1, or `None` when it was
            found at the epoch's end.
        steps: The steps of an epoch.
        learning_rate: The run's peak learning rate (`--learning-rate`).
        epochs_done: The epochs completed before it (kept in the backup).
    """

    def __init__(
        self,
        what: str,
        epoch: int,
        step: int | None,
        steps: int,
        learning_rate: float,
        epochs_done: int,
    ) -> None:
        self.what = what
        self.epoch = epoch
        self.step = step
        self.steps = steps
        self.learning_rate = learning_rate
        self.epochs_done = epochs_done
        super().__init__(f"{what} {self.where}")

    @property
    def where(self) -> str:
        """When it happened, e.g. `at epoch 2, step 5 of 7`."""
        if self.step is None:
            return f"at the end of epoch {self.epoch}"
        return f"at epoch {self.epoch}, step {self.step} of {self.steps}"
