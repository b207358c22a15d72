"""Runs `tfsim train --strategy multi-worker` as two workers on this machine.

Each worker is a separate process with its own `TF_CONFIG`: the same cluster
(two workers on free 127.0.0.1 ports) and its own task index. Together they
train one model with `MultiWorkerMirroredStrategy`, batch norm synchronised
across both processes. Worker 0 (the chief) writes the results to `--output`;
worker 1 writes only its TensorBoard logs and backups, to `OUTPUT/worker-1`.

Usage (any further options go to `tfsim train`):

    python examples/multi_worker.py --output mw-output --epochs 2

See `examples/multi_worker.md` for the same run on a real cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """Returns `count` distinct free TCP ports on 127.0.0.1."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def main(argv: list[str] | None = None) -> int:
    """Starts the workers, streams the chief's output, and returns the first failure's code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default: 2)")
    parser.add_argument("--output", default="mw-output", help="tfsim --output of the chief")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before giving up")
    args, tfsim_args = parser.parse_known_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")

    ports = free_ports(args.workers)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    output = Path(args.output)
    output.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "tensorflow_similarity",
        "train",
        "--strategy",
        "multi-worker",
        "--output",
        str(output),
        *tfsim_args,
    ]
    workers: list[subprocess.Popen] = []
    logs = []
    try:
        for index in range(args.workers):
            env = dict(os.environ)
            env["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            )
            env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
            # One process per device: on a single GPU machine the workers would share it.
            env.setdefault("CUDA_VISIBLE_DEVICES", "")
            log = None if index == 0 else open(output / f"worker-{index}.log", "wb")
            logs.append(log)
            workers.append(
                subprocess.Popen(
                    command, env=env, stdout=log, stderr=subprocess.STDOUT if log else None
                )
            )
        deadline = time.monotonic() + args.timeout
        while any(w.poll() is None for w in workers):
            if time.monotonic() > deadline:
                print(f"multi_worker: timed out after {args.timeout:.0f} s", file=sys.stderr)
                return 124
            if any(w.returncode not in (None, 0) for w in workers):
                break
            time.sleep(0.5)
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
        for log in logs:
            if log is not None:
                log.close()
    codes = [w.returncode for w in workers]
    for index, code in enumerate(codes):
        if code != 0 and index > 0:
            print(f"multi_worker: worker {index} exited with {code}; see its log:", file=sys.stderr)
            print((output / f"worker-{index}.log").read_text()[-4000:], file=sys.stderr)
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    raise SystemExit(main())
