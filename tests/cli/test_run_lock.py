"""`cli.run_lock`: one run at a time in an `--output` folder; a killed run's lock is taken over."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from tensorflow_similarity.cli import main, run_folder
from tensorflow_similarity.cli.errors import UsageError
from tensorflow_similarity.cli.run_lock import LOCK_FILE, RunLock, check_not_in_use


def write_lock(folder, pid, host=None):
    holder = {"pid": pid, "host": host or socket.gethostname(), "started": "2026-01-01T00:00:00Z"}
    (folder / LOCK_FILE).write_text(json.dumps(holder))


@contextlib.contextmanager
def held_lock(folder, pid, record=True):
    """The lock of `folder` held as a run holds it, its file naming `pid` (or empty)."""
    if record:
        write_lock(folder, pid)
    else:
        (folder / LOCK_FILE).write_text("")
    descriptor = os.open(folder / LOCK_FILE, os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


@pytest.fixture
def live_pid():
    """The pid of a live process of this host, reaped at the end."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait(timeout=10)


def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait(timeout=30)
    return process.pid


def test_the_lock_records_its_holder_refuses_a_second_and_is_released(tmp_path):
    with RunLock(tmp_path):
        holder = json.loads((tmp_path / LOCK_FILE).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
        assert holder["started"].endswith("Z")
        with pytest.raises(
            UsageError, match=rf"is in use by another tfsim run \(pid {os.getpid()}"
        ):
            RunLock(tmp_path).acquire()
    assert not (tmp_path / LOCK_FILE).exists()


def test_the_lock_is_released_when_the_run_fails(tmp_path):
    with pytest.raises(RuntimeError), RunLock(tmp_path):
        raise RuntimeError("training failed")
    assert not (tmp_path / LOCK_FILE).exists()


def test_a_lock_held_by_a_live_process_is_refused(tmp_path, live_pid):
    with held_lock(tmp_path, live_pid):
        with pytest.raises(
            UsageError, match=rf"in use by another tfsim run \(pid {live_pid} on host"
        ):
            check_not_in_use(tmp_path)
        with pytest.raises(
            UsageError, match="Wait for it to end, stop it, or give another --output"
        ):
            RunLock(tmp_path).acquire()
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == live_pid


def test_a_free_lock_naming_a_live_pid_is_stale(tmp_path, capsys):
    # A run that is pid 1 of its container, killed and restarted the same way, finds its own
    # pid in the lock it left: only the lock, which the killed process no longer holds, counts.
    write_lock(tmp_path, os.getpid())
    check_not_in_use(tmp_path)
    with RunLock(tmp_path):
        assert "taking over the stale lock" in capsys.readouterr().err
        assert RunLock(tmp_path).held is False


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_a_folder_or_link_at_the_locks_path_is_refused_naming_it(tmp_path, capsys, kind):
    if kind == "folder":
        (tmp_path / LOCK_FILE).mkdir()
    else:
        (tmp_path / LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    message = rf"{str(tmp_path / LOCK_FILE)!r} is a (folder|symbolic link), not a tfsim lock"
    with pytest.raises(UsageError, match=message):
        check_not_in_use(tmp_path)
    with pytest.raises(UsageError, match=message):
        RunLock(tmp_path).acquire()
    assert "taking over" not in capsys.readouterr().err
    assert os.path.lexists(tmp_path / LOCK_FILE)


def test_a_stale_lock_of_a_killed_process_is_named_and_taken_over(tmp_path, capsys):
    pid = dead_pid()
    write_lock(tmp_path, pid)
    check_not_in_use(tmp_path)
    lock = RunLock(tmp_path)
    lock.acquire()
    assert f"taking over the stale lock {str(tmp_path / LOCK_FILE)!r}" in capsys.readouterr().err
    assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / LOCK_FILE).exists()


def test_an_empty_lock_is_in_use_only_while_held(tmp_path, capsys):
    with held_lock(tmp_path, None, record=False):
        with pytest.raises(UsageError, match="another tfsim run is starting there"):
            RunLock(tmp_path).acquire()
    with RunLock(tmp_path):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert "taking over" not in capsys.readouterr().err


def test_a_lock_from_another_host_is_refused_with_how_to_delete_it(tmp_path):
    write_lock(tmp_path, 1, host="elsewhere.example")
    with pytest.raises(UsageError, match=rf"another host .*rm {tmp_path / LOCK_FILE}"):
        RunLock(tmp_path).acquire()


def test_the_lock_is_not_a_runs_file(tmp_path):
    with RunLock(tmp_path):
        assert run_folder.run_files(tmp_path) == []
        run_folder.check_new_run(tmp_path, resume=False, overwrite=False)
        run_folder.clear(tmp_path)
        assert (tmp_path / LOCK_FILE).is_file()


def test_a_second_run_on_a_folder_in_use_is_refused_before_any_work(
    tmp_path, live_pid, capsys, monkeypatch
):
    from tensorflow_similarity.cli import command

    def no_work(*args, **kwargs):
        raise AssertionError("loaded data for a refused run")

    monkeypatch.setattr(command, "load_data", no_work)
    (tmp_path / "run.json").write_text(json.dumps({"options": {}}))
    with held_lock(tmp_path, live_pid):
        status = main(["train", "--data", "digits", "--overwrite", "--output", str(tmp_path)])
    assert status == 2
    assert f"tfsim: error: --output {str(tmp_path)!r} is in use by another tfsim run" in (
        capsys.readouterr().err
    )
    assert (tmp_path / "run.json").is_file()  # --overwrite deleted nothing


class SecondRunAtTrainBegin(keras.callbacks.Callback):
    """Starts a second `tfsim` run on the same folder once the first is about to train.

    Then interrupts the first (as Ctrl-C would): what the test needs is the first run's
    folder, lock and files while it is in use, not its training.
    """

    def __init__(self, argv):
        super().__init__()
        self.argv, self.status = argv, None

    def on_train_begin(self, logs=None):
        self.status = main(self.argv)
        raise KeyboardInterrupt


def test_a_second_run_started_while_the_first_trains_is_refused(tmp_path, capsys):
    output = tmp_path / "out"
    options = ["--data", "digits", "--strategy", "one-device", "--no-deterministic"]
    options += ["--limit", "120", "--batch-size", "16", "--projector-dim", "16", "--epochs", "1"]
    second = SecondRunAtTrainBegin(["pretrain", *options, "--overwrite", "--output", str(output)])
    assert main(["pretrain", *options, "--output", str(output)], callbacks=[second]) == 130
    error = capsys.readouterr().err
    assert second.status == 2
    assert f"tfsim: error: --output {str(output)!r} is in use by another tfsim run (pid " in error
    assert f"(pid {os.getpid()} on host {socket.gethostname()!r}" in error
    # The second run's --overwrite deleted nothing of the first's, and the first's lock is gone.
    assert json.loads((output / "run.json").read_text())["options"]["epochs"] == 1
    assert not (output / LOCK_FILE).exists()


def _race(folders, log, barrier, hold_s, seed):
    """In a forked process: for each folder in turn, with the others, takes its lock at once.

    Holding it, it records "enter" and "exit" in `log`, then releases it. Each racer starts
    up to half a millisecond after the others: a takeover that is not atomic can lose to one
    a few steps ahead of it, which racers started at the same instant rarely are.
    """
    descriptor = os.open(log, os.O_WRONLY | os.O_APPEND)
    delays = np.random.default_rng(seed).uniform(0, 5e-4, len(folders))
    for folder, delay in zip(folders, delays, strict=True):
        barrier.wait(30)
        time.sleep(delay)
        lock = RunLock(folder)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                lock.acquire()
        except UsageError:
            continue
        os.write(descriptor, f"enter {folder.name}\n".encode())
        time.sleep(hold_s)
        os.write(descriptor, f"exit {folder.name}\n".encode())
        lock.release()
    os._exit(0)


@pytest.mark.slow
def test_processes_taking_over_a_stale_lock_at_once_never_hold_it_together(tmp_path):
    log = tmp_path / "holders.log"
    log.touch()
    pid = dead_pid()
    folders = [tmp_path / f"trial-{trial}" for trial in range(100)]
    for folder in folders:
        folder.mkdir()
        write_lock(folder, pid)
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(3)
    racers = [
        context.Process(target=_race, args=(folders, log, barrier, 0.002, seed))
        for seed in range(3)
    ]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(60)
        assert racer.exitcode == 0
    # Each holder wrote "enter" once it held the lock and "exit" before releasing it: with one
    # holder at a time, the log alternates the two.
    lines = [line.split() for line in log.read_text().splitlines()]
    pairs = zip(lines, lines[1:], strict=False)
    together = {folder for (a, folder), (b, _) in pairs if a == b == "enter"}
    assert lines and lines[0][0] == "enter" and not together, f"held together: {together}"
    assert [kind for kind, _ in lines] == ["enter", "exit"] * (len(lines) // 2)


@pytest.mark.parametrize("command", ["lookup", "export"])
def test_lookup_and_export_of_a_run_in_progress_say_so(tmp_path, capsys, command):
    output = tmp_path / "run"
    output.mkdir()
    # What a supervised run's folder holds while it trains its first epoch.
    (output / "run.json").write_text(json.dumps({"options": {"algorithm": "multisimilarity"}}))
    argv = {
        "lookup": ["lookup", "--output", str(output), str(tmp_path / "query.png")],
        "export": ["export", str(output), str(tmp_path / "served")],
    }[command]
    with held_lock(output, os.getpid()):
        assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"holds a run still in progress (pid {os.getpid()} on host" in error
    assert "--resume" not in error and "stopped before" not in error
    assert not (tmp_path / "served").exists()
