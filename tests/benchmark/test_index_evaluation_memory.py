"""Smoke test of `benchmark.index_evaluation_memory` in-process on tiny counts: rows, tables."""

from __future__ import annotations

import json

from benchmark import index_evaluation_memory, report


def test_run_writes_a_row_per_verb_and_count_and_renders(tmp_path):
    payload = index_evaluation_memory.run(
        [300, 1200],
        index_size=50,
        dim=4,
        classes=3,
        seed=0,
        quick=True,
        out=tmp_path,
        in_process=True,
    )
    assert [(row["verb"], row["queries"]) for row in payload["rows"]] == [
        (verb, count) for count in (300, 1200) for verb in index_evaluation_memory.VERBS
    ]
    assert all(row["extra_peak_mib"] >= 0 for row in payload["rows"])
    assert [line.split(":")[0] for line in payload["verdicts"]] == list(
        index_evaluation_memory.VERBS
    )
    assert json.loads((tmp_path / "index_evaluation_memory.json").read_text()) == payload
    markdown = (tmp_path / "index_evaluation_memory.md").read_text()
    for line in payload["verdicts"]:
        assert line in markdown
    section = report.script_section(payload, tmp_path, "index_evaluation_memory.json")
    assert "`python -m benchmark.index_evaluation_memory --quick`" in section


def test_verdicts_say_when_a_peak_grows_with_the_queries():
    rows = [
        {"verb": "evaluate_retrieval", "queries": 10, "extra_peak_mib": 40.0},
        {"verb": "evaluate_retrieval", "queries": 100, "extra_peak_mib": 400.0},
        {"verb": "evaluate_classification", "queries": 10, "extra_peak_mib": 40.0},
        {"verb": "evaluate_classification", "queries": 100, "extra_peak_mib": 50.0},
    ]
    lines = index_evaluation_memory.verdicts(rows)
    assert lines[0].endswith("target missed (grows with the queries).")
    assert lines[1].endswith("target met.")
