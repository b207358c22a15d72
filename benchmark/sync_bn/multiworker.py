"""Section `multiworker` of `benchmark.sync_bn`: the ResNet-18 step in two processes.

Two `MultiWorkerMirroredStrategy` processes on 127.0.0.1
(`python -m benchmark.sync_bn.worker`, one CPU replica each) time the step of
the ResNet section; worker 0 reports.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmark.common import markdown_table
from benchmark.sync_bn.common import (
    VARIANT_LABELS,
    RunConfig,
    fmt,
    markdown_section,
    ratios_to_plain,
)
from tensorflow_similarity.testing import run_local_workers

WORKER_MODULE = "benchmark.sync_bn.worker"
TIMEOUT_S = 900.0


def measure(config: RunConfig, timeout: float = TIMEOUT_S) -> dict[str, Any]:
    """The ResNet step with one CPU replica in each of two processes on this host.

    Raises:
        RuntimeError: If a worker fails or the group outlives `timeout` seconds
            (every worker is killed and reaped either way).
    """
    setting = config.multiworker
    with tempfile.TemporaryDirectory() as tmp:
        result_path = Path(tmp) / "result.json"
        args = [
            "--model",
            setting.name,
            "--image-size",
            str(setting.image_size),
            "--batch-per-replica",
            str(setting.batch_per_replica),
            "--variants",
            ",".join(config.multiworker_variants),
            "--reps",
            str(config.multiworker_reps),
            "--out",
            str(result_path),
        ]
        start = time.perf_counter()
        # `run_local_workers` starts `python <script> <args>` with this process's working
        # directory and environment, through which `python -m benchmark.sync_bn` found the
        # package; with `-m` as the script, each worker is `python -m benchmark.sync_bn.worker`.
        run_local_workers("-m", 2, [WORKER_MODULE, *args], timeout=timeout)
        measured = json.loads(result_path.read_text())
    global_batch = 2 * setting.batch_per_replica
    return {
        "model": setting.name,
        **dataclasses.asdict(setting),
        "workers": 2,
        "replicas": 2,
        "global_batch": global_batch,
        **measured,
        "images_per_s": {
            name: global_batch / (ms / 1e3) for name, ms in measured["median_ms"].items()
        },
        "over_plain": ratios_to_plain(measured["times_ms"]),
        "wall_s": time.perf_counter() - start,
    }


def render(row: dict[str, Any]) -> str:
    table = markdown_table(
        ["variant", "median ms", "images / s", "ratio to plain", "build s"],
        [
            [
                VARIANT_LABELS[v],
                fmt(row["median_ms"][v], 0),
                fmt(row["images_per_s"][v], 1),
                fmt(row["over_plain"][v], 3),
                fmt(row["trace_s"][v] + row["first_step_s"][v], 0),
            ]
            for v in row["median_ms"]
        ],
    )
    return markdown_section(
        "Two worker processes (MultiWorkerMirroredStrategy)",
        f"The {row['model']} step of the table above ({row['image_size']}x{row['image_size']} "
        f"images, {row['batch_per_replica']} per replica) in 2 processes on 127.0.0.1, one CPU "
        "replica each, collectives over gRPC; times from worker 0, "
        f"{len(row['times_ms']['plain'])} interleaved steps per variant.",
        table,
    )
