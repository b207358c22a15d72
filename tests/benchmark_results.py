"""Tooling of the benchmark smoke tests: loading a script, running it quick, where it writes."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

BENCHMARK_DIR = Path(__file__).resolve().parents[1] / "benchmark"
RESULTS_DIR = BENCHMARK_DIR / "results"
_QUICK_FOLDER = re.compile(r"^Quick run: results go to (.+?) \(", re.MULTILINE)


def results_snapshot() -> dict[str, tuple[int, str]]:
    """Each file of `benchmark/results` (the committed full runs): its mtime and SHA-256."""
    return {
        str(path.relative_to(RESULTS_DIR)): (
            path.stat().st_mtime_ns,
            hashlib.sha256(path.read_bytes()).hexdigest(),
        )
        for path in sorted(RESULTS_DIR.rglob("*"))
        if path.is_file()
    }


def quick_output_folder(stdout: str) -> Path:
    """The folder a `--quick` run without `--out` said it writes to."""
    match = _QUICK_FOLDER.search(stdout)
    assert match, f"a quick run must print where its results go; stdout ends:\n{stdout[-2000:]}"
    return Path(match.group(1))


def run_quick(script: str, tmp_path: Path) -> Path:
    """Runs `benchmark/<script>.py --quick` in a fresh process; returns the folder it wrote.

    Its temporary folder goes under `tmp_path` (pytest removes it). Asserts that the run
    left `benchmark/results` (the committed full runs) as it was.
    """
    before = results_snapshot()
    result = subprocess.run(
        [sys.executable, str(BENCHMARK_DIR / f"{script}.py"), "--quick"],
        cwd=BENCHMARK_DIR,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert results_snapshot() == before, "a --quick run must not write to benchmark/results"
    return quick_output_folder(result.stdout)


def load_benchmark(name: str) -> ModuleType:
    """Imports `benchmark/<name>.py` without running it, as `benchmark/report.py` does.

    The scripts import `benchmark_common` by file name, so their folder goes
    on `sys.path` (at the end: it shadows nothing).
    """
    if str(BENCHMARK_DIR) not in sys.path:
        sys.path.append(str(BENCHMARK_DIR))
    return importlib.import_module("benchmark_common").load_benchmark_module(name)
