"""benchmark.index_scale: its phases, run in this process on a small set, and its tables."""

from __future__ import annotations

import pytest

from benchmark import index_scale

pytest.importorskip("faiss")


def test_phases_with_every_cell_probed_find_the_exact_neighbours(tmp_path):
    arguments = {
        "kind": "clustered", "count": 3_000, "dim": 16, "clusters": 20, "seed": 0,
        "queries": 30, "k": 10, "nlist": 8, "nprobes": [2, 8], "work": str(tmp_path),
    }  # fmt: skip
    row = {"data": "clustered", "faiss_exact": index_scale.phase_exact_faiss(arguments)}
    row["faiss_ivf"] = {
        **index_scale.phase_ivf_faiss_add(arguments),
        **index_scale.phase_ivf_faiss_query(arguments),
    }
    row["ours"] = {
        **index_scale.phase_ours_add(arguments),
        **index_scale.phase_ours_query(arguments),
    }
    # With all 8 cells probed, IVF-Flat is exact: faiss' and ours.
    assert row["faiss_ivf"]["sweep"][8]["recall"] == 1.0
    assert row["ours"]["sweep"][8]["recall"] == 1.0
    assert row["ours"]["default_nprobe"] == 8
    # JSON turns the sweep's keys into strings, as the written results have them.
    for name in ("faiss_ivf", "ours"):
        row[name]["sweep"] = {str(p): v for p, v in row[name]["sweep"].items()}
    payload = {
        "machine": "x", "load_average": 1.0, "faiss": "1", "count": 3_000, "dim": 16,
        "queries": 30, "k": 10, "nlist": 8, "rows": [row],
    }  # fmt: skip
    payload["verdicts"] = index_scale.verdicts(payload)
    markdown = index_scale.render_markdown(payload)
    assert "recall@10 at the default nprobe=8: 1.000 >= 0.95 -> met" in markdown
    assert "| FaissOnDiskSearch (nprobe=8) |" in markdown
