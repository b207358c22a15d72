"""Tooling of the benchmark smoke tests: running a benchmark quick, and where it writes."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from benchmark.common import REPO_ROOT, RESULTS_DIR

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


def run_benchmark(
    module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess:
    """Runs `python -m <module> <args>` from the repository root, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_quick(module: str, tmp_path: Path) -> Path:
    """Runs `python -m <module> --quick` in a fresh process; returns the folder it wrote.

    Its temporary folder goes under `tmp_path` (pytest removes it). Asserts that the run
    left `benchmark/results` (the committed full runs) as it was.
    """
    before = results_snapshot()
    result = run_benchmark(module, "--quick", env={"TMPDIR": str(tmp_path)}, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert results_snapshot() == before, "a --quick run must not write to benchmark/results"
    return quick_output_folder(result.stdout)
