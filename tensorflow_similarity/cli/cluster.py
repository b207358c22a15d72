"""A `--strategy multi-worker` cluster: a bounded wait for its tasks, and the end of a lost one.

`MultiWorkerMirroredStrategy()` blocks until every task of `TF_CONFIG`'s
cluster has started, with no limit, inside a TensorFlow call that holds
Python's interpreter lock (no Python thread or signal handler runs until it
returns): a worker that never starts keeps the others waiting forever,
printing nothing. So before the strategy exists, `wait_for_cluster` meets the
other tasks on the ports `TF_CONFIG` gives them, in plain Python: each task
listens on its own port and connects to every other's, and goes on once it
has reached every task and every task has reached it (then it closes its
port, for TensorFlow's server to take). The wait is announced and bounded by
`--worker-timeout`; at the limit it raises `ClusterError` naming the tasks
that never answered, and a task whose `TF_CONFIG` lists another cluster is
refused at once.

A task lost during training (killed, its machine gone) makes the collectives
of every other task fail with a TensorFlow error naming the peer;
`report_lost_task` turns it into `tfsim: error:` naming the task, the backup
every worker keeps and the `--resume` command.

`TF_CONFIG` is read in one place, `read_tf_config`, which checks all of it
(the jobs, each address's port, the task's type and index) and refuses a
malformed one with a message that quotes it; `devices.is_chief_process`
calls it before a run does any work.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass

import tensorflow as tf

from tensorflow_similarity.cli.errors import EXIT_CLUSTER, ClusterError, UsageError

# The TensorFlow errors a collective ends in when a peer is gone.
_PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.AbortedError,
    tf.errors.CancelledError,
    tf.errors.DeadlineExceededError,
    tf.errors.FailedPreconditionError,
)
_TASK_NAME = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
# Seconds between two tries to reach a task that did not answer yet.
_RETRY = 0.2


@dataclass(frozen=True)
class Task:
    """One task of the cluster: its job (`worker` or `chief`), index and address."""

    job: str
    index: int
    address: str

    def __str__(self) -> str:
        return f"{self.job} {self.index} ({self.address})"

    @property
    def port(self) -> int:
        return int(self.address.rpartition(":")[2])

    @property
    def host(self) -> str:
        return self.address.rpartition(":")[0].strip("[]")


# The jobs of a cluster tfsim trains on, in the order of their tasks.
_JOBS = ("chief", "worker")
_EXAMPLE = (
    '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}'
)


def _bad_tf_config(raw: str, what: str) -> UsageError:
    return UsageError(
        f'TF_CONFIG {raw} is not valid: {what}. It must be JSON like {_EXAMPLE} (a "chief" '
        'job of one address may come first), the same "cluster" on every task, and each '
        'task its own "task".'
    )


def _check_address(raw: str, job: str, index: int, address: object) -> str:
    where = f'"{job}" address {index}'
    if not isinstance(address, str):
        raise _bad_tf_config(raw, f'{where} is {json.dumps(address)}, not a "host:port" string')
    host, colon, port = address.rpartition(":")
    if not colon or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise _bad_tf_config(
            raw, f'{where}, {address!r}, is not "host:port" with a port from 1 to 65535'
        )
    return address


def read_tf_config() -> tuple[list[Task], Task] | None:
    """The cluster of `TF_CONFIG` and this process's task, checked; `None` if it is unset.

    Returns:
        `(tasks, own)`: the tasks that train (the chief, if any, then the
        workers) and this process's own, or `None` if `TF_CONFIG` is unset
        or empty (one worker alone).

    Raises:
        UsageError: Quoting `TF_CONFIG`, if it is not a JSON object with a
            `"cluster"` of `"chief"` (one address) and `"worker"` lists of
            `"host:port"` strings, all different, and a `"task"` whose
            `"type"` is one of its jobs and whose `"index"` is a whole
            number within that job's list.

    Example:

    >>> import json, os
    >>> from unittest import mock
    >>> cluster = {"worker": ["a:2222", "b:2222"]}
    >>> config = {"cluster": cluster, "task": {"type": "worker", "index": 1}}
    >>> with mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(config)}):
    ...     tasks, own = read_tf_config()
    >>> len(tasks), str(own)
    (2, 'worker 1 (b:2222)')
    """
    raw = os.environ.get("TF_CONFIG", "")
    if not raw.strip():
        return None
    try:
        config = json.loads(raw)
    except ValueError as error:
        raise _bad_tf_config(raw, f"it is not JSON ({error})") from None
    if not isinstance(config, dict):
        raise _bad_tf_config(raw, "it is not a JSON object")
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        raise _bad_tf_config(raw, 'it has no "cluster" object naming the tasks\' addresses')
    other = [job for job in cluster if job not in _JOBS]
    if other:
        raise _bad_tf_config(
            raw, f'tfsim trains with "chief" and "worker" tasks only, not {other[0]!r}'
        )
    tasks = []
    for job in (job for job in _JOBS if job in cluster):
        addresses = cluster[job]
        if not isinstance(addresses, list) or not addresses:
            shown = json.dumps(addresses)
            fix = f" (write [{shown}])" if isinstance(addresses, str) else ""
            raise _bad_tf_config(
                raw, f'"{job}" is {shown}, not a list of "host:port" addresses{fix}'
            )
        if job == "chief" and len(addresses) != 1:
            raise _bad_tf_config(raw, f'"chief" lists {len(addresses)} addresses, not one')
        tasks += [
            Task(job, index, _check_address(raw, job, index, address))
            for index, address in enumerate(addresses)
        ]
    seen: dict[str, Task] = {}
    for task in tasks:
        if task.address in seen:
            raise _bad_tf_config(
                raw, f"{seen[task.address]} and {task.job} {task.index} share one address"
            )
        seen[task.address] = task
    task = config.get("task")
    if not isinstance(task, dict):
        raise _bad_tf_config(raw, 'it has no "task" object saying which task this one is')
    job, index = task.get("type"), task.get("index")
    if job not in cluster:
        raise _bad_tf_config(
            raw,
            f'"task" "type" {json.dumps(job)} is not a job of its "cluster" '
            f"({', '.join(json.dumps(j) for j in cluster)})",
        )
    if isinstance(index, str) and index.isdigit():
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int):
        raise _bad_tf_config(raw, f'"task" "index" {json.dumps(index)} is not a whole number')
    count = len(cluster[job])
    if not 0 <= index < count:
        raise _bad_tf_config(
            raw,
            f'"task" "index" {index} is not one of the {count} "{job}" tasks (0 to {count - 1})',
        )
    own = next(t for t in tasks if (t.job, t.index) == (job, index))
    return tasks, own


def cluster_tasks() -> tuple[list[Task], Task | None]:
    """The tasks of `TF_CONFIG`'s cluster that train, and this process's own task.

    Returns:
        `(tasks, own)`: the chief (if any) then the workers, and this
        process's task; `([], None)` without a valid `TF_CONFIG`
        (`read_tf_config` refuses one before a run starts).
    """
    try:
        config = read_tf_config()
    except UsageError:
        return [], None
    return config if config is not None else ([], None)


def _digest(tasks: list[Task]) -> str:
    return hashlib.sha256(json.dumps([t.address for t in tasks]).encode()).hexdigest()[:16]


def _listen(own: Task) -> socket.socket:
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(
                ("", own.port), family=socket.AF_INET6, dualstack_ipv6=True, reuse_port=False
            )
        return socket.create_server(("", own.port))
    except OSError as error:
        raise ClusterError(
            f"this task, {own}, cannot listen on port {own.port} ({error.strerror or error}): "
            "another program holds it. Free the port, or give this task another one in every "
            "task's TF_CONFIG."
        ) from None


class _Rendezvous:
    """Who this task has reached, and who reached it (see the module)."""

    def __init__(self, own: Task, tasks: list[Task]) -> None:
        self.own, self.digest = own, _digest(tasks)
        self.others = [task for task in tasks if task != own]
        self.reached: set[Task] = set()
        self.heard: set[tuple[str, int]] = set()
        self.foreign: list[str] = []
        self.lock = threading.Lock()

    def hello(self) -> bytes:
        return (json.dumps([self.own.job, self.own.index, self.digest]) + "\n").encode()

    def accept(self, listener: socket.socket, stop: threading.Event) -> None:
        listener.settimeout(_RETRY)
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                try:
                    job, index, digest = json.loads(connection.makefile().readline())
                    # Either side of a meeting of two clusters learns of it, whichever
                    # reaches the other first.
                    connection.sendall(b"ok\n" if digest == self.digest else b"other\n")
                except (OSError, ValueError, TypeError):
                    continue
            with self.lock:
                if digest != self.digest:
                    self.foreign.append(f"{job} {index}")
                else:
                    self.heard.add((job, int(index)))

    def reach(self, task: Task) -> bool:
        try:
            with socket.create_connection((task.host, task.port), timeout=2) as connection:
                connection.settimeout(5)
                connection.sendall(self.hello())
                answer = connection.makefile().readline().strip()
        except (OSError, ValueError):
            return False
        if answer == "other":
            with self.lock:
                self.foreign.append(f"{task.job} {task.index}")
        return answer == "ok"

    def complete(self) -> bool:
        with self.lock:
            return len(self.reached) == len(self.others) and all(
                (t.job, t.index) in self.heard for t in self.others
            )


def wait_for_cluster(timeout: float) -> None:
    """Waits at most `timeout` seconds for every other task of the cluster (see the module).

    Returns at once outside a cluster of several tasks. Prints on stderr
    that it waits, for how long and for how many tasks.

    Args:
        timeout: Seconds to wait, positive.

    Raises:
        ClusterError: If a task has not answered within `timeout`, naming it
            and how to start it, or if a task's `TF_CONFIG` lists another
            cluster.
    """
    tasks, own = cluster_tasks()
    if own is not None and len(tasks) > 1:
        meet(own, tasks, timeout)


def meet(own: Task, tasks: list[Task], timeout: float) -> None:
    """`wait_for_cluster` for the cluster `tasks`, as the task `own`.

    Raises:
        ClusterError: As `wait_for_cluster`.
    """
    meeting = _Rendezvous(own, tasks)
    print(
        f"tfsim: waiting up to {timeout:g} s for the cluster's {len(tasks)} tasks to start "
        f"(this is {own}; --worker-timeout sets the limit).",
        file=sys.stderr,
        flush=True,
    )
    deadline = time.monotonic() + timeout
    stop = threading.Event()
    with _listen(own) as listener:
        listening = threading.Thread(target=meeting.accept, args=(listener, stop), daemon=True)
        listening.start()
        try:
            while not meeting.complete() and not meeting.foreign:
                if time.monotonic() > deadline:
                    break
                for task in meeting.others:
                    if task not in meeting.reached and meeting.reach(task):
                        meeting.reached.add(task)
                time.sleep(_RETRY)
        finally:
            stop.set()
            listening.join(timeout=5)
    if meeting.foreign:
        raise ClusterError(
            f"the TF_CONFIG of {', '.join(dict.fromkeys(meeting.foreign))} lists another "
            f'cluster than this task\'s ({own}): every task must list the same "cluster", '
            'in the same order, with its own "task".'
        )
    if meeting.complete():
        return
    _raise_timeout(timeout, meeting)


def _raise_timeout(timeout: float, meeting: _Rendezvous) -> None:
    silent = [task for task in meeting.others if task not in meeting.reached]
    deaf = [
        task
        for task in meeting.others
        if task in meeting.reached and (task.job, task.index) not in meeting.heard
    ]
    parts = []
    if silent:
        verb = "never answered" if len(silent) == 1 else "never answered, each of them"
        parts.append(
            f"{', '.join(map(str, silent))} {verb}. Start tfsim with the same options on "
            + "; on ".join(
                f'{t.job} {t.index} (TF_CONFIG "task": {{"type": "{t.job}", "index": {t.index}}})'
                for t in silent
            )
        )
    if deaf:
        parts.append(
            f"{', '.join(map(str, deaf))} answered but never reached this task at "
            f"{meeting.own.address}: check that its TF_CONFIG lists this address and that "
            "the port is open to it"
        )
    raise ClusterError(
        f"the multi-worker cluster did not form within {timeout:g} s ({meeting.own}): "
        + "; ".join(parts)
        + ". Start the missing tasks, or give them longer with --worker-timeout. No model was "
        "trained."
    )


def is_peer_failure(error: BaseException) -> bool:
    """Whether `error` is how a collective ends when another task of the cluster is gone."""
    return isinstance(error, _PEER_ERRORS) or (
        isinstance(error, tf.errors.OpError) and "Collective ops is aborted" in str(error)
    )


def lost_task(error: BaseException) -> str:
    """The task a peer failure names (`"worker 1 (host:port)"`), other than this one."""
    tasks, own = cluster_tasks()
    own_name = (own.job, own.index) if own else None
    for job, index in _TASK_NAME.findall(str(error)):
        if (job, int(index)) != own_name:
            task = next((t for t in tasks if (t.job, t.index) == (job, int(index))), None)
            return str(task) if task else f"{job} {index}"
    return "another task of the cluster"


def report_lost_task(error: BaseException, command: str, output: str, epochs_done: int) -> int:
    """Prints which task was lost and how to resume; returns `EXIT_CLUSTER`."""
    cause = str(error).strip().splitlines()
    cause_words = next((line for line in cause if "aborted by" in line), cause[0] if cause else "")
    cause_words = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", cause_words).strip()
    kept = (
        f"backup/ keeps epoch {epochs_done} on every worker"
        if epochs_done
        else "no epoch was completed, so --resume starts from the first"
    )
    print(
        f"tfsim: error: lost {lost_task(error)} of the multi-worker cluster during training "
        f"(TensorFlow: {cause_words or type(error).__name__}). {kept}. Once every task can run "
        f"again, continue on each with its own TF_CONFIG: tfsim {command} --strategy "
        f"multi-worker --output {output} --resume",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_CLUSTER
