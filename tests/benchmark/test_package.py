"""`benchmark` is a package run as `python -m benchmark....`, with no path tricks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmark.common import BENCHMARK_DIR, REPO_ROOT

# What a user (or a benchmark starting a worker) runs, from the repository root.
ENTRY_POINTS = (
    "benchmark.report",
    "benchmark.architectures",
    "benchmark.determinism",
    "benchmark.cached_batches",
    "benchmark.index",
    "benchmark.index_evaluation",
    "benchmark.index_evaluation_memory",
    "benchmark.index_scale",
    "benchmark.linear_vs_flat",
    "benchmark.replica_rows",
    "benchmark.serving_external",
    "benchmark.serving_size",
    "benchmark.glyphs.large_batch",
    "benchmark.glyphs.runs",
    "benchmark.glyphs.ssl_length",
    "benchmark.glyphs.teachers",
    "benchmark.metric.losses",
    "benchmark.metric.protocol",
    "benchmark.metric.small_batch",
    "benchmark.self_supervised.leakage",
    "benchmark.self_supervised.quality",
    "benchmark.self_supervised.small_batch",
    "benchmark.sync_bn",
    "benchmark.sync_bn.reference_range",
    "benchmark.sync_bn.worker",
    "benchmark.views",
    "benchmark.views_peer",
)


def sources():
    return sorted(BENCHMARK_DIR.rglob("*.py"))


def test_every_runnable_module_is_an_entry_point():
    runnable = set()
    for path in sources():
        if 'if __name__ == "__main__":' in path.read_text():
            parts = path.relative_to(BENCHMARK_DIR.parent).with_suffix("").parts
            runnable.add(".".join(parts[:-1] if parts[-1] == "__main__" else parts))
    assert runnable == set(ENTRY_POINTS)


def test_no_module_changes_the_import_path_or_loads_a_file_by_path():
    for path in sources():
        text = path.read_text()
        for forbidden in ("sys.path", "spec_from_file_location"):
            assert forbidden not in text, f"{path.relative_to(BENCHMARK_DIR)}: {forbidden}"


# Each entry point as `python -m <module> --help` runs it (`runpy.run_module` with
# `alter_sys=True`), from the repository root, all in one fresh Python: a Python per
# entry point would import TensorFlow 19 times.
_HELP_ALL = """
import contextlib, io, json, runpy, sys
results = {}
for module in sys.argv[1:]:
    out = io.StringIO()
    sys.argv = [module, "--help"]
    code = None
    with contextlib.redirect_stdout(out):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            code = exit.code
    results[module] = [code, out.getvalue()]
print(json.dumps(results))
"""


@pytest.mark.slow
def test_help_runs_from_the_repository_root():
    result = subprocess.run(
        [sys.executable, "-c", _HELP_ALL, *ENTRY_POINTS],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    assert list(results) == list(ENTRY_POINTS)
    for module, (code, stdout) in results.items():
        # argparse prints the usage and exits with 0 on --help.
        assert code == 0 and "usage:" in stdout, (module, code, stdout[-500:])
