"""Runs a script in several `MultiWorkerMirroredStrategy` worker processes on 127.0.0.1.

Testing tooling (the package itself never imports it), for tests, benchmarks
and trying multi-worker training on one machine: each worker gets a
`TF_CONFIG` naming every worker's free loopback port and its own index.
Timeouts are bounded and every process is killed and reaped, whatever happens.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """Returns `count` distinct free TCP ports on 127.0.0.1."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def run_local_workers(
    script: str | Path,
    num_workers: int,
    args: list[str],
    timeout: float = 180.0,
    *,
    hide_gpus: bool = True,
) -> list[str]:
    """Starts `num_workers` copies of `script`, waits for all, and returns their outputs.

    Args:
        script: Python file run by every worker.
        num_workers: Number of worker processes.
        args: Extra command-line arguments (the same for every worker).
        timeout: Seconds for the whole group; on expiry every worker is killed.
        hide_gpus: Whether the workers see no GPU (`CUDA_VISIBLE_DEVICES=""`),
            so that several processes on one machine do not compete for the
            same GPUs. Defaults to `True`.

    Returns:
        The combined stdout+stderr of each worker, in task order.

    Raises:
        RuntimeError: If a worker fails or the group times out (outputs included).

    Example:

    Each worker finds its place in the cluster in `TF_CONFIG`, as a
    `MultiWorkerMirroredStrategy` would:

    >>> import os
    >>> import tempfile
    >>> from tensorflow_similarity.testing.local_cluster import run_local_workers
    >>> script = os.path.join(tempfile.mkdtemp(), "worker.py")
    >>> with open(script, "w") as file:
    ...     _ = file.write("import json, os, sys; "
    ...                    "task = json.loads(os.environ['TF_CONFIG'])['task']; "
    ...                    "print(task['index'], sys.argv[1:])")
    >>> outputs = run_local_workers(script, 2, ["--epochs", "1"], timeout=60)
    >>> [output.strip() for output in outputs]
    ["0 ['--epochs', '1']", "1 ['--epochs', '1']"]
    """
    ports = free_ports(num_workers)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs: list[subprocess.Popen] = []
    logs: list[Path] = []
    log_dir = tempfile.TemporaryDirectory(prefix="local-cluster-")
    try:
        for index in range(num_workers):
            env = dict(os.environ)
            env["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            )
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            if hide_gpus:
                env["CUDA_VISIBLE_DEVICES"] = ""
            log = Path(log_dir.name) / f"worker-{index}.log"
            logs.append(log)
            with open(log, "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(script), *args],
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    )
                )
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers timed out after {timeout}s:\n" + _dump(logs))
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
        if any(p.poll() != 0 for p in procs):
            time.sleep(1.0)
            raise RuntimeError(
                f"a worker failed (exit codes {[p.poll() for p in procs]}):\n" + _dump(logs)
            )
        return [log.read_text(errors="replace") for log in logs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        log_dir.cleanup()


def _dump(logs: list[Path]) -> str:
    parts = []
    for i, log in enumerate(logs):
        text = log.read_text(errors="replace") if log.exists() else "<no log>"
        # The first traceback line and the end of the log are what explain a failure.
        start = text.find("Traceback")
        head = text[start : start + 3000] if start >= 0 else ""
        parts.append(f"--- worker {i} ---\n{head}\n...\n{text[-3000:]}")
    return "\n".join(parts)
