"""Smoke test of `benchmark.index_evaluation` in-process on tiny data: rows, values, tables.

Timings are never asserted; that both sides give the same values is, and so
is that the report renders the results.
"""

from __future__ import annotations

import json

from benchmark import index_evaluation, report


def test_run_writes_rows_with_identical_values_and_renders(tmp_path):
    payload = index_evaluation.run(
        size=120, dim=8, classes=4, repeats=1, seed=0, quick=True, out=tmp_path
    )
    assert [(row["owner"], row["verb"]) for row in payload["rows"]] == [
        ("Indexer", "evaluate_retrieval"),
        ("Indexer", "calibrate"),
        ("SimilarityModel", "evaluate_retrieval"),
        ("SimilarityModel", "calibrate"),
    ]
    for row in payload["rows"]:
        assert row["max_difference"] == 0.0
        assert row["ratio"] == row["seconds"] / row["direct_seconds"]
    assert json.loads((tmp_path / "index_evaluation.json").read_text()) == payload

    markdown = (tmp_path / "index_evaluation.md").read_text()
    for line in payload["verdicts"]:
        assert line in markdown
    section = report.script_section(payload, tmp_path, "index_evaluation.json")
    assert "## Index evaluation path (`index_evaluation.json`)" in section
    assert "`python -m benchmark.index_evaluation --quick`" in section


def test_max_difference_sees_a_changed_or_missing_value():
    same = {"a": 0.5, "b": [1.0, 2.0]}
    assert index_evaluation.max_difference(same, same) == 0.0
    assert index_evaluation.max_difference({"a": 0.25, "b": [1.0, 2.0]}, same) == 0.25
    assert index_evaluation.max_difference({"a": 0.5}, same) == float("inf")
