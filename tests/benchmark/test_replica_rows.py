"""`python -m benchmark.replica_rows`: one replica's measurement and the table it renders."""

from __future__ import annotations

import pytest

from benchmark import replica_rows


@pytest.mark.parametrize("loss_name", replica_rows.LOSSES)
def test_one_replica_is_measured_in_process(loss_name):
    every = replica_rows.measure_one(loss_name, batch=16, rows=16, repeats=1, seed=0)
    own = replica_rows.measure_one(loss_name, batch=16, rows=4, repeats=1, seed=0)

    for result in (every, own):
        assert result["seconds"] > 0
        assert result["peak_mib"] >= 0


def test_the_table_has_one_row_per_loss_batch_and_replica_count():
    rows = [
        {
            "loss": "simclr",
            "global_batch": 1024,
            "replicas": k,
            "all_rows_seconds": 0.02,
            "own_rows_seconds": 0.02 / k,
            "all_rows_peak_mib": 40.0,
            "own_rows_peak_mib": 40.0 / k,
        }
        for k in replica_rows.REPLICAS
    ]
    payload = {"machine": "x", "tensorflow": "2", "date": "d", "dim": 128, "repeats": 5}

    table = replica_rows.render_markdown({**payload, "rows": rows})

    lines = [line for line in table.splitlines() if line.startswith("| simclr")]
    assert len(lines) == len(replica_rows.REPLICAS)
    assert lines[-1].split(" | ")[5] == "0.12"  # time ratio at K = 8
    assert lines[-1].split(" | ")[8].rstrip(" |") == "0.12"
