"""`EpochBackup`: one backup file a run resumes from, replaced whole at each epoch's end."""

from __future__ import annotations

import errno

import keras
import numpy as np
import pytest

from tensorflow_similarity.callbacks import EpochBackup, epoch_backup


def compiled_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 2)).astype("float32")


def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights(tmp_path):
    x, y = data()
    uninterrupted = compiled_model()
    uninterrupted.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)

    first = compiled_model()
    backup = EpochBackup(tmp_path / "backup", steps_per_epoch=4)
    first.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[backup])
    assert backup.epochs_saved == 2 and backup.path.is_file()
    assert sorted(p.name for p in (tmp_path / "backup").iterdir()) == ["latest.weights.h5"]

    resumed = compiled_model()
    restored = EpochBackup(tmp_path / "backup", steps_per_epoch=4)
    epoch = restored.restore(resumed)
    assert epoch == 2 and int(resumed.optimizer.iterations.numpy()) == 8
    resumed.fit(x, y, batch_size=8, initial_epoch=epoch, epochs=3, shuffle=False, verbose=0)
    for ours, theirs in zip(resumed.get_weights(), uninterrupted.get_weights(), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)


def test_without_a_backup_restore_starts_from_the_first_epoch(tmp_path):
    model = compiled_model()
    before = [w.copy() for w in model.get_weights()]
    assert EpochBackup(tmp_path / "none", steps_per_epoch=4).restore(model) == 0
    for ours, theirs in zip(model.get_weights(), before, strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_the_backup_of_a_run_with_other_epochs_is_refused(tmp_path):
    x, y = data()
    model = compiled_model()
    backup = EpochBackup(tmp_path, steps_per_epoch=4)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[backup])
    with pytest.raises(ValueError, match="holds 4 training steps, not a whole number of this run"):
        EpochBackup(tmp_path, steps_per_epoch=3).restore(compiled_model())


@pytest.mark.parametrize(("steps", "error"), [(0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_steps_per_epoch_must_be_a_positive_integer(tmp_path, steps, error):
    with pytest.raises(error, match="steps_per_epoch"):
        EpochBackup(tmp_path, steps_per_epoch=steps)


def test_a_backup_that_cannot_fit_on_the_disk_is_refused_before_it_is_written(
    tmp_path, monkeypatch
):
    # h5py crashes the process when the disk fills during its write: the space is checked first.
    x, y = data()
    model = compiled_model()
    backup = EpochBackup(tmp_path / "backup", steps_per_epoch=4)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[backup])
    written = backup.path.read_bytes()
    assert len(written) <= backup.space_needed()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    usage = epoch_backup.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(
        epoch_backup.shutil,
        "disk_usage",
        lambda path: usage._replace(free=backup.space_needed() - 1),
    )
    with pytest.raises(OSError, match=r"Backing up epoch 2 to .* MiB free on that disk\)") as error:
        backup.on_epoch_end(1)
    assert error.value.errno == errno.ENOSPC
    assert backup.path.read_bytes() == written and backup.epochs_saved == 1
    assert sorted(p.name for p in backup.backup_dir.iterdir()) == ["latest.weights.h5"]
