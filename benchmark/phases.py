"""Phases of a benchmark run each in a fresh Python process, and what they measure there.

A phase's peak resident memory (`VmHWM`) is its own only in a process of its own:
`run_phase` starts `python -m <module> --phase <phase> --phase-args <json>`, and the
module writes the phase's result to `<work>/<phase>.json`, which `run_phase` returns.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def status_mb(key: str) -> float:
    """A memory figure of this process from `/proc/self/status`, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def folder_bytes(path: Path) -> int:
    """The bytes a file, or the files under a folder, take on disk (allocated blocks: files
    may be sparse)."""
    if path.is_file():
        return path.stat().st_blocks * 512
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file())


def run_phase(module: str, phase: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Runs `phase` of the benchmark `module` in a fresh Python process; returns its result.

    `arguments` must name the `work` folder the phase writes `<phase>.json` into.
    """
    out = Path(arguments["work"]) / f"{phase}.json"
    command = [sys.executable, "-m", module, "--phase", phase, "--phase-args"]
    begin = time.perf_counter()
    subprocess.run(
        [*command, json.dumps(arguments)],
        check=True,
        timeout=timeout,
        stdout=subprocess.DEVNULL,
    )
    result = json.loads(out.read_text())
    print(f"  {phase}: {time.perf_counter() - begin:.0f} s {json.dumps(result)}", flush=True)
    return result
