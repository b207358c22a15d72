"""Benchmark of cross-replica batch normalisation: collectives, step time, robustness.

Compares, side by side in one run, four batch-norm layers under
`tf.distribute.MirroredStrategy`:

* `plain`: `keras.layers.BatchNormalization()` (per-replica statistics),
* `keras`: `keras.layers.BatchNormalization(synchronized=True)`,
* `ours`: `tensorflow_similarity.layers.SyncBatchNormalization()` (its
  `exchange="auto"` is the constant-size "reduce" path on CPUs and GPUs),
* `ours_gather`: `SyncBatchNormalization(exchange="gather")`, one row per
  replica (the TPU path).

It prints markdown tables and writes them, with the machine they were
measured on, to `<out>/sync_bn.md` and `<out>/sync_bn.json`
(`sync_bn_gpu.*` with `--device gpu`). Each section is a module of its own in
`benchmark/sync_bn/`:

1. `collectives` (`collectives.py`): collectives, bytes and other ops
   per batch-norm layer per training step at 2, 4 and 8 replicas, counted
   from the traced graph and cross-checked with a trace-time counter.
   Targets: ours <= 2 collectives, forward bytes constant in the number of
   replicas, fewer added ops than Keras'.
2. `step_time` (`step_time.py`): training step time of a small
   ResNet-style model with 1, 2, 4, 8 replicas, as ratios to plain batch norm,
   latency-bound and compute-bound. Target: our overhead at most half of Keras'.
3. `robustness` (`robustness.py`): relative error of the batch variance
   against float64 NumPy when |mean| / std is 0, 1e2, 1e3, 1e4.
4. `resnet` (`resnet.py`): step time and images/second of `ResNet18Sim`
   and `ResNet50Sim` at 1, 2, 4, 8 replicas, ours with `group_size=2` included.
5. `multiworker` (`multiworker.py`): the same ResNet-18 step in two
   `MultiWorkerMirroredStrategy` processes on 127.0.0.1 (`worker.py`).
6. `floor` (`floor.py`): the analytic floor, all-reduces and bytes per
   step of each synchronised batch norm against the optimizer's gradient
   all-reduce, at the measured all-reduce latency and bandwidth of this host,
   and a model of ResNet-50's batch-norm bytes per step from 2 to 256 replicas.

A last table (`targets.py`) checks the constant-size exchange's targets (bytes
and ops per layer, ResNet-50's step-time overhead against Keras' and against
the analytic floor, the first step's time) against whatever sections the
report holds.

The options are parsed in `options.py`; the results' file, JSON keys and markdown
are in `results.py`.

The replicas are logical devices carved out of one physical device (8 logical
CPUs by default; `--device gpu` splits the first GPU into 8 logical GPUs), so
step times measure the synchronisation cost, not a speed-up. On a CPU host the
replicas share the cores: timings are noisy, which is why the three variants
are interleaved within every repetition and medians are reported.

Graph construction dominates the cost of the ResNet tables on a small host: on
2 cores a synchronised ResNet-50 step at 8 replicas takes minutes to trace and
optimise (its graph has several times plain batch norm's ops). A full run is
therefore long (tables 1-3 take ~7 minutes on 2 cores, the ResNet table at
1, 2, 4, 8 replicas far longer); `--sections` and `--replicas` measure a part,
and the tables not measured are kept from the existing report in `--out`. A
full run times each ResNet and replica count in a child process of its own
(`--isolate`): TensorFlow does not give back the memory of the graphs it has
built, and one process holding them all ran out of 24 GB at ResNet-50 with 8
replicas.

A full run writes to `benchmark/results`; a `--quick` run writes to a new
temporary folder (its path is printed), so that it never replaces the full
results. `--out` chooses the folder either way.

Usage (from the repository root):

    python -m benchmark.sync_bn                           # everything
    python -m benchmark.sync_bn --quick                   # smoke run, a few minutes
    python -m benchmark.sync_bn --sections resnet,floor --replicas 1,2,4
    python -m benchmark.sync_bn --device gpu              # logical GPUs on one GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# Importing these creates no TensorFlow context, so the logical devices can
# still be configured in main().
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import REPO_ROOT, command_line, output_folder  # noqa: E402
from benchmark.sync_bn import (  # noqa: E402
    collectives,
    floor,
    multiworker,
    resnet,
    robustness,
    step_time,
)
from benchmark.sync_bn.common import (  # noqa: E402
    RunConfig,
    configure_devices,
    log,
    make_strategies,
)
from benchmark.sync_bn.options import parse_args, run_config  # noqa: E402
from benchmark.sync_bn.results import (  # noqa: E402
    SECTION_KEYS,
    kept_from_earlier,
    render_markdown,
    stem_for,
)

MODULE = "benchmark.sync_bn"


def metadata(config: RunConfig, description: str, argv: Sequence[str]) -> dict[str, Any]:
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(MODULE, argv[1:]),
        "device": config.device,
        "hardware": description,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "quick": config.quick,
        "replica_counts": list(config.replica_counts),
        "reps": config.reps,
        "steps_per_rep": config.steps_per_rep,
        "settings": [dataclasses.asdict(s) for s in config.settings],
        "resnet_settings": [dataclasses.asdict(s) for s in config.resnets],
        "resnet_reps": config.resnet_reps,
        "multiworker_setting": (
            None if config.multiworker is None else dataclasses.asdict(config.multiworker)
        ),
        "floor_replicas": list(config.floor_replicas),
    }


def isolated_resnet_rows(config: RunConfig, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The resnet section's rows, each ResNet and replica count timed by a child process.

    Every child is `python -m benchmark.sync_bn --sections resnet`, one setting and one
    replica count, writing to a temporary folder; a child that fails stops the
    run with its exit status and the tail of its output.
    """
    rows = []
    for setting in config.resnets:
        for replicas in setting.replica_counts:
            with tempfile.TemporaryDirectory(prefix="sync_bn_resnet_") as folder:
                command = [
                    sys.executable,
                    "-m",
                    MODULE,
                    "--sections",
                    "resnet",
                    "--no-isolate",
                    "--resnet-models",
                    setting.name,
                    "--replicas",
                    str(replicas),
                    "--device",
                    args.device,
                    "--gpu-memory-mb",
                    str(args.gpu_memory_mb),
                    "--out",
                    folder,
                    *(["--quick"] if config.quick else []),
                ]
                log(f"  {setting.name}, {replicas} replica(s): child process...")
                done = subprocess.run(
                    command, cwd=REPO_ROOT, capture_output=True, text=True, check=False
                )
                if done.returncode != 0:
                    raise RuntimeError(
                        f"the resnet child for {setting.name} at {replicas} replica(s) exited "
                        f"with {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}"
                    )
                child = json.loads((Path(folder) / f"{stem_for(args.device)}.json").read_text())
                rows += child["resnet_step_time"]
                last = child["resnet_step_time"][-1]
                log(
                    f"  {setting.name}, {replicas} replica(s): "
                    + ", ".join(f"{v} {ms:.0f} ms" for v, ms in last["median_ms"].items())
                )
    return rows


def measure_sections(
    config: RunConfig,
    strategies: dict[int, tf.distribute.MirroredStrategy],
    out_json: Path,
    resnet_rows: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Runs the selected sections in order; returns their results by JSON key.

    `resnet_rows`, when given, are the resnet section's rows measured elsewhere
    (`isolated_resnet_rows`).
    """
    sections = config.sections
    probe = strategies[config.probe_replicas]
    report: dict[str, Any] = {}
    if "collectives" in sections:
        log("Collectives, bytes and ops per layer...")
        report["collectives"] = collectives.measure(strategies, config)
    if "step_time" in sections:
        log("Step times...")
        report["step_time"] = step_time.measure(strategies, config)
    if "robustness" in sections:
        log(f"Variance robustness ({config.probe_replicas} replicas)...")
        report["robustness"] = robustness.measure(probe)
    if "resnet" in sections:
        log("ResNet step times...")
        if resnet_rows is None:
            resnet_rows = resnet.measure(strategies, config)
        report["resnet_step_time"] = resnet_rows
    if "multiworker" in sections:
        log("Two worker processes...")
        report["multiworker"] = multiworker.measure(config)
    if "floor" in sections:
        log("Analytic floor...")
        resnet_rows = report.get("resnet_step_time")
        resnet_origin = None
        if resnet_rows is None:
            earlier = kept_from_earlier(out_json, config.device, sections).get("resnet")
            resnet_rows = earlier["data"] if earlier else []
            resnet_origin = earlier["origin"] if earlier else None
        report["floor"] = floor.measure(strategies, config, resnet_rows, resnet_origin)
    return report


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv if argv is None else argv)
    args = parse_args(argv[1:])
    config = run_config(args)
    devices, description = configure_devices(args.device, args.gpu_memory_mb)
    sections = config.sections
    counts = [config.probe_replicas]
    if "collectives" in sections:
        counts += config.collective_replicas
    if "step_time" in sections:
        counts += config.replica_counts
    isolate = (not config.quick) if args.isolate is None else args.isolate
    if "resnet" in sections and not isolate:
        counts += [k for r in config.resnets for k in r.replica_counts]
    if "floor" in sections:
        counts += config.floor_replicas
    strategies = make_strategies(devices, counts)
    out = output_folder(args.out, config.quick, "sync_bn")
    stem = stem_for(args.device)
    out_json = out / f"{stem}.json"
    started = time.perf_counter()
    resnet_rows = None
    if "resnet" in sections and isolate:
        log("ResNet step times, one process per setting...")
        resnet_rows = isolated_resnet_rows(config, args)
    report = measure_sections(config, strategies, out_json, resnet_rows)

    kept = kept_from_earlier(out_json, args.device, sections)
    for name, entry in kept.items():
        report[SECTION_KEYS[name]] = entry["data"]
    report = {
        "meta": {
            **metadata(config, description, argv),
            "sections": list(sections),
            "kept_sections": {name: entry["origin"] for name, entry in kept.items()},
            "elapsed_s": round(time.perf_counter() - started, 1),
        },
        **{key: report[key] for key in SECTION_KEYS.values() if key in report},
    }
    log("Done.")
    markdown = render_markdown(report)
    print()
    print(markdown)

    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown)
    out_json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {out / f'{stem}.md'} and {out_json}")
    return report
