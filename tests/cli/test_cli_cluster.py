"""`cli.cluster`: a multi-worker run waits for its workers within a bound, and names a lost one."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tensorflow as tf

from tensorflow_similarity.cli import cluster, devices, main
from tensorflow_similarity.cli.errors import EXIT_CLUSTER
from tensorflow_similarity.cli.run_lock import LOCK_FILE
from tensorflow_similarity.testing.local_cluster import free_ports

TINY = ["--data", "digits", "--limit", "120", "--batch-size", "16", "--projector-dim", "16"]
TINY += ["--no-deterministic"]


def tf_config(ports: list[int], index: int) -> str:
    cluster_spec = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    return json.dumps({"cluster": cluster_spec, "task": {"type": "worker", "index": index}})


def start_worker(ports, index, argv, log: Path) -> subprocess.Popen:
    env = dict(os.environ, TF_CONFIG=tf_config(ports, index), TF_CPP_MIN_LOG_LEVEL="2")
    env["CUDA_VISIBLE_DEVICES"] = ""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tensorflow_similarity", *argv],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def reap(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def test_the_cluster_and_this_task_come_from_tf_config(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", tf_config([1001, 1002], 1))
    tasks, own = cluster.cluster_tasks()
    assert [str(task) for task in tasks] == [
        "worker 0 (127.0.0.1:1001)",
        "worker 1 (127.0.0.1:1002)",
    ]
    assert own == tasks[1]
    monkeypatch.setenv("TF_CONFIG", "not json")
    assert cluster.cluster_tasks() == ([], None)


def local_tasks(count: int) -> list[cluster.Task]:
    return [
        cluster.Task("worker", i, f"127.0.0.1:{port}") for i, port in enumerate(free_ports(count))
    ]


def meet_in_threads(tasks, members, timeout):
    """Runs `cluster.meet` for each of `members` (indices into `tasks`); returns their errors."""
    errors: dict[int, BaseException | None] = {}

    def member(index):
        try:
            cluster.meet(tasks[index], tasks, timeout)
            errors[index] = None
        except cluster.ClusterError as error:
            errors[index] = error

    threads = [threading.Thread(target=member, args=(i,)) for i in members]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout + 30)
    return errors


def test_the_tasks_of_a_cluster_meet_whatever_order_they_start_in():
    tasks = local_tasks(3)
    assert meet_in_threads(tasks, [2, 0, 1], timeout=30) == {0: None, 1: None, 2: None}


def test_a_task_that_never_starts_is_named_after_the_timeout():
    tasks = local_tasks(3)
    started = time.monotonic()
    errors = meet_in_threads(tasks, [0, 1], timeout=2)
    assert time.monotonic() - started < 20
    for index in (0, 1):
        message = str(errors[index])
        assert message.startswith(
            f"the multi-worker cluster did not form within 2 s ({tasks[index]}): "
            f"{tasks[2]} never answered. Start tfsim with the same options on worker 2 "
            '(TF_CONFIG "task": {"type": "worker", "index": 2})'
        )


def test_a_task_with_another_cluster_is_refused_at_once():
    tasks = local_tasks(3)
    other = tasks[:2]  # worker 1's TF_CONFIG lists two workers, worker 0's three

    def stranger():
        with contextlib.suppress(cluster.ClusterError):
            cluster.meet(other[1], other, 3)

    thread = threading.Thread(target=stranger)
    thread.start()
    started = time.monotonic()
    with pytest.raises(cluster.ClusterError, match=r"TF_CONFIG of worker 1 lists another cluster"):
        cluster.meet(tasks[0], tasks, 30)
    assert time.monotonic() - started < 15
    thread.join(timeout=30)


def test_a_lost_task_is_named_from_the_collectives_error_not_this_task(monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", tf_config([1001, 1002], 0))
    error = tf.errors.UnavailableError(
        None,
        None,
        "{{function_node __wrapped__CollectiveReduceV2_device_/job:worker/replica:0/task:0/"
        "device:CPU:0}} Collective ops is aborted by: recvmsg:Connection reset by peer\n"
        "Additional GRPC error information from remote target /job:worker/replica:0/task:1",
    )
    assert cluster.is_peer_failure(error)
    assert not cluster.is_peer_failure(tf.errors.InvalidArgumentError(None, None, "shape"))
    assert cluster.lost_task(error) == "worker 1 (127.0.0.1:1002)"
    assert cluster.report_lost_task(error, "pretrain", "out", 2) == EXIT_CLUSTER
    message = capsys.readouterr().err
    assert message.startswith("tfsim: error: lost worker 1 (127.0.0.1:1002) of the multi-worker")
    assert "(TensorFlow: Collective ops is aborted by: recvmsg:Connection reset by peer)" in message
    assert "backup/ keeps epoch 2 on every worker" in message
    assert "tfsim pretrain --strategy multi-worker --output out --resume" in message


def test_a_worker_timeout_that_is_not_positive_is_refused(tmp_path, capsys):
    for value in ("0", "-1", "nan"):
        argv = ["pretrain", *TINY, "--worker-timeout", value, "--output", str(tmp_path / "o")]
        assert main(argv) == 2
        assert "--worker-timeout must be a positive number" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_worker_that_never_starts_ends_the_wait_naming_it(tmp_path):
    ports = free_ports(2)
    output = tmp_path / "out"
    argv = ["pretrain", "--strategy", "multi-worker", "--worker-timeout", "4", *TINY]
    argv += ["--epochs", "1", "--output", str(output)]
    log = tmp_path / "worker-0.log"
    chief = start_worker(ports, 0, argv, log)
    try:
        status = chief.wait(timeout=240)
    finally:
        reap([chief])
    text = log.read_text(errors="replace")
    assert status == EXIT_CLUSTER, text[-3000:]
    assert "tfsim: waiting up to 4 s for the cluster's 2 tasks to start" in text
    assert (
        f"tfsim: error: the multi-worker cluster did not form within 4 s (worker 0 "
        f"(127.0.0.1:{ports[0]})): worker 1 (127.0.0.1:{ports[1]}) never answered" in text
    )
    assert '"task": {"type": "worker", "index": 1}' in text
    assert "Traceback" not in text
    assert not (output / LOCK_FILE).exists()
    assert not (output / "model.keras").exists()


@pytest.mark.slow
def test_a_lost_worker_ends_the_other_with_the_resume_command_and_the_run_resumes(tmp_path):
    ports = free_ports(2)
    output = tmp_path / "out"
    argv = ["pretrain", "--strategy", "multi-worker", *TINY, "--epochs", "3"]
    argv += ["--output", str(output)]
    workers = [start_worker(ports, i, argv, tmp_path / f"worker-{i}.log") for i in range(2)]
    try:
        deadline = time.monotonic() + 300
        backup = output / "worker-1" / "backup" / "latest.weights.h5"
        while not backup.exists():
            assert time.monotonic() < deadline, "worker 1 never finished an epoch"
            assert all(w.poll() is None for w in workers)
            time.sleep(0.2)
        workers[1].kill()
        lost_at = time.monotonic()
        status = workers[0].wait(timeout=180)
        waited = time.monotonic() - lost_at
    finally:
        reap(workers)
    text = (tmp_path / "worker-0.log").read_text(errors="replace")
    assert status == EXIT_CLUSTER, text[-3000:]
    assert f"tfsim: error: lost worker 1 (127.0.0.1:{ports[1]}) of the multi-worker" in text
    assert "on every worker. Once every task can run again" in text
    assert f"tfsim pretrain --strategy multi-worker --output {output} --resume" in text
    assert "Traceback" not in text
    assert waited < 170
    assert (output / "backup" / "latest.weights.h5").is_file()
    assert not (output / "model.keras").exists()
    assert not (output / LOCK_FILE).exists()

    # The command it printed continues the run on both workers, to the end.
    resume = ["pretrain", "--strategy", "multi-worker", "--output", str(output), "--resume"]
    workers = [start_worker(ports, i, resume, tmp_path / f"resume-{i}.log") for i in range(2)]
    try:
        codes = [worker.wait(timeout=400) for worker in workers]
    finally:
        reap(workers)
    assert codes == [0, 0], (tmp_path / "resume-0.log").read_text(errors="replace")[-3000:]
    history = json.loads((output / "history.json").read_text())
    assert [record["epoch"] for record in history["epochs"]] == [1, 2, 3]
    assert (output / "model.keras").is_file()


TWO_WORKERS = '{"cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}, "task": '


@pytest.mark.parametrize(
    "tf_config_text, message",
    [
        (
            '{"cluster": {"worker": "127.0.0.1:2222"}, "task": {"type": "worker", "index": 0}}',
            r'"worker" is "127.0.0.1:2222", not a list of "host:port" addresses '
            r'\(write \["127.0.0.1:2222"\]\)',
        ),
        (
            TWO_WORKERS + '{"type": "worker", "index": 2}}',
            r'"task" "index" 2 is not one of the 2 "worker" tasks \(0 to 1\)',
        ),
        (
            TWO_WORKERS + '{"type": "worker", "index": "zero"}}',
            r'"task" "index" "zero" is not a whole number',
        ),
        (
            TWO_WORKERS + '{"type": "chief", "index": 0}}',
            r'"task" "type" "chief" is not a job of its "cluster" \("worker"\)',
        ),
        (
            '{"cluster": {"worker": ["127.0.0.1"]}, "task": {"type": "worker", "index": 0}}',
            r'"worker" address 0, \'127.0.0.1\', is not "host:port" with a port',
        ),
        ("{'cluster': {}}", r"it is not JSON"),
    ],
    ids=["worker-string", "index-out-of-range", "index-word", "no-chief", "no-port", "json"],
)
def test_a_malformed_tf_config_is_refused_quoting_it_before_any_work(
    tmp_path, monkeypatch, capsys, tf_config_text, message
):
    from tensorflow_similarity.cli import command

    def no_work(*args, **kwargs):
        raise AssertionError("loaded data with a malformed TF_CONFIG")

    monkeypatch.setattr(command, "load_data", no_work)
    monkeypatch.setenv("TF_CONFIG", tf_config_text)
    output = tmp_path / "out"
    argv = ["pretrain", *TINY, "--strategy", "multi-worker", "--output", str(output)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"tfsim: error: TF_CONFIG {tf_config_text} is not valid: ")
    assert re.search(message, error), error
    assert not output.exists()


def test_a_valid_tf_config_names_the_chief_and_each_task(monkeypatch):
    cluster_spec = {"chief": ["[::1]:2220"], "worker": ["127.0.0.1:2221"]}
    for task, chief, index in [("chief", True, 0), ("worker", False, 0)]:
        config = {"cluster": cluster_spec, "task": {"type": task, "index": "0"}}
        monkeypatch.setenv("TF_CONFIG", json.dumps(config))
        tasks, own = cluster.read_tf_config()
        assert [str(t) for t in tasks] == ["chief 0 ([::1]:2220)", "worker 0 (127.0.0.1:2221)"]
        assert (own.job, devices.is_chief_process("multi-worker"), devices.task_index()) == (
            task,
            chief,
            index,
        )
    monkeypatch.delenv("TF_CONFIG")
    assert cluster.read_tf_config() is None and devices.is_chief_process("multi-worker")
