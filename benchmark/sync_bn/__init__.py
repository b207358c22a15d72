"""What synchronised batch norm costs: collectives, bytes, step time, robustness, its floor.

`python -m benchmark.sync_bn` (`run.py`) runs the sections, one module each, and
writes `benchmark/results/sync_bn.md` and `.json`; `report.py` is their part of
`REPORT.md`.
"""
