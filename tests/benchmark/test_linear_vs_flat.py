"""benchmark.linear_vs_flat: its phases, run in this process on a small set, and its tables."""

from __future__ import annotations

import pytest

from benchmark import linear_vs_flat

pytest.importorskip("faiss")


def test_phases_find_faiss_neighbours_and_the_report_states_the_verdicts():
    arguments = {
        "count": 2_000, "dim": 8, "queries": 20, "k": 5, "seed": 0, "chunk": 700, "repeats": 2,
    }  # fmt: skip
    timed = linear_vs_flat.phase_time(arguments)
    # Both exact, on data without ties: the same neighbours.
    assert timed["agreement"] == 1.0
    assert len(timed["ratios"]) == 2 and timed["median_ratio"] > 0
    row = {"count": 2_000, "time": timed, "time_one_thread": {**timed}, "memory_ratio": 1.25}
    for backend in linear_vs_flat.BACKENDS:
        row[backend] = linear_vs_flat.phase_memory({**arguments, "backend": backend})
        assert row[backend]["query_growth_mb"] >= row[backend]["add_growth_mb"] >= 0
    row["time"] = {**timed, "median_ratio": 1.5}
    payload = {
        "machine": "x", "load_average": 1.0, "faiss": "1", "dim": 8, "queries": 20, "k": 5,
        "repeats": 2, "chunk": 700, "rows": [row],
    }  # fmt: skip
    payload["verdicts"] = linear_vs_flat.verdicts(payload)
    markdown = linear_vs_flat.render_markdown(payload)
    assert "lookup time 1.50x faiss' (> 1.2x -> NOT met; one thread each: " in markdown
    assert "peak memory growth 1.25x (<= 1.3x -> met)" in markdown
    assert "| 2,000 |" in markdown
