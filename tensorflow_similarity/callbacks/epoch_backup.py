"""`EpochBackup`: the weights and optimizer state after each epoch, to resume a run from."""

from __future__ import annotations

import errno
import math
import os
import shutil
from pathlib import Path
from typing import Any

import keras
import numpy as np

# What an HDF5 weights file adds to its variables' bytes: about a kilobyte of structure per
# variable and a few tens per file; these bounds are above both, with a margin.
_HDF5_PER_VARIABLE = 4096
_HDF5_PER_FILE = 1 << 16


class EpochBackup(keras.callbacks.Callback):
    """Saves the model's weights and optimizer state after each epoch, to resume from.

    One file, `backup_dir/latest.weights.h5`, replaced atomically at each
    epoch's end (written beside it, then renamed), so a kill at any moment
    leaves the previous epoch's backup or this one, whole. The epoch to resume
    from is the optimizer's step count, saved in the same file as the
    weights, so the two cannot disagree. Keras' `BackupAndRestore` passes the
    resumed epoch to `fit` alone; here `restore` returns it before `fit`
    starts, for a data pipeline that must know it (a seeded order of
    batches, say).

    Before each save the free space of `backup_dir` is checked against the
    size of the weights and optimizer state (`space_needed`): h5py, which
    writes the file, crashes the whole process (a segmentation fault) when
    the disk fills during its write, so a save that cannot fit is refused
    first with an `OSError` (`ENOSPC`) that names the file and the space
    left, the previous backup unchanged.

    Args:
        backup_dir: The folder of the backup (created when first written).
        steps_per_epoch: Optimizer steps in an epoch.

    Example:
        ```python
        backup = EpochBackup("backup", steps_per_epoch=len(x) // 64)
        with strategy.scope():
            model = build_model()
            model.compile(optimizer="adam", loss=loss)
            first_epoch = backup.restore(model)  # 0 without a backup
        model.fit(data, initial_epoch=first_epoch, epochs=30, callbacks=[backup])
        ```
    """

    def __init__(self, backup_dir: str | os.PathLike, steps_per_epoch: int) -> None:
        super().__init__()
        if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int):
            raise TypeError(f"steps_per_epoch must be an integer; got {steps_per_epoch!r}.")
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be at least 1; got {steps_per_epoch}.")
        self.backup_dir = Path(backup_dir)
        self.steps_per_epoch = steps_per_epoch
        self.epochs_saved = 0

    @property
    def path(self) -> Path:
        """The backup file."""
        return self.backup_dir / "latest.weights.h5"

    def restore(self, model: keras.Model) -> int:
        """Loads the backup into `model` if there is one; returns the epochs it completed.

        Call it after `compile` (and inside the strategy's scope, under one):
        it builds the optimizer's variables to load their state.

        Args:
            model: The compiled model the backup was written from.

        Returns:
            The number of completed epochs the backup holds, 0 without one.

        Raises:
            ValueError: If the backup's step count is not a whole number of
                epochs of `steps_per_epoch` steps (a backup of another run).
        """
        if not self.path.is_file():
            return 0
        if not model.optimizer.built:
            model.optimizer.build(model.trainable_variables)
        model.load_weights(self.path)
        steps = int(model.optimizer.iterations.numpy())
        if steps % self.steps_per_epoch:
            raise ValueError(
                f"the backup in {str(self.backup_dir)!r} holds {steps} training steps, not a "
                f"whole number of this run's {self.steps_per_epoch}-step epochs: it is the "
                "backup of another run. Delete it, or start from the first epoch elsewhere."
            )
        self.epochs_saved = steps // self.steps_per_epoch
        return self.epochs_saved

    def space_needed(self) -> int:
        """Bytes a backup of the model takes at most: its variables and the file's structure.

        Returns:
            The raw size of the model's weights and its optimizer's
            variables, plus what HDF5 adds per variable and per file.
        """
        variables = [*self.model.weights]
        if getattr(self.model, "optimizer", None) is not None:
            variables += list(self.model.optimizer.variables)
        raw = sum(math.prod(v.shape) * np.dtype(v.dtype).itemsize for v in variables)
        return raw + _HDF5_PER_VARIABLE * len(variables) + _HDF5_PER_FILE

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.backup_dir.mkdir(parents=True, exist_ok=True)
        partial = self.backup_dir / "saving.weights.h5"
        partial.unlink(missing_ok=True)
        needed, free = self.space_needed(), shutil.disk_usage(self.backup_dir).free
        if free < needed:
            raise OSError(
                errno.ENOSPC,
                f"Backing up epoch {epoch + 1} to {str(self.path)!r} needs about "
                f"{needed / 2**20:.1f} MiB ({free / 2**20:.1f} MiB free on that disk); the "
                "previous backup there (if any) is unchanged. Free space, then resume from it",
            )
        try:
            self.model.save_weights(partial, overwrite=True)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        os.replace(partial, self.path)
        self.epochs_saved = epoch + 1
