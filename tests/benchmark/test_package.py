"""`benchmark` is a package run as `python -m benchmark....`, with no path tricks."""

from __future__ import annotations

import pytest

from benchmark.common import BENCHMARK_DIR
from tests.benchmark.quick_runs import run_benchmark

# What a user (or a benchmark starting a worker) runs, from the repository root.
ENTRY_POINTS = (
    "benchmark.report",
    "benchmark.architectures",
    "benchmark.determinism",
    "benchmark.index",
    "benchmark.index_evaluation",
    "benchmark.replica_rows",
    "benchmark.serving_size",
    "benchmark.glyphs.large_batch",
    "benchmark.glyphs.runs",
    "benchmark.glyphs.ssl_length",
    "benchmark.glyphs.teachers",
    "benchmark.metric.losses",
    "benchmark.metric.small_batch",
    "benchmark.self_supervised.quality",
    "benchmark.self_supervised.small_batch",
    "benchmark.sync_bn",
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


# A fresh Python per entry point, most of them importing TensorFlow: seconds each.
@pytest.mark.slow
@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_runs_from_the_repository_root(module):
    result = run_benchmark(module, "--help", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "usage:" in result.stdout
