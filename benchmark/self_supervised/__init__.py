"""What batch-norm statistics do to self-supervised learning: per-replica, synchronised, one device.

`python -m benchmark.self_supervised.quality` (8 and 32 images per replica) and
`python -m benchmark.self_supervised.small_batch` (2 and 4) write `ssl_quality.*` and
`ssl_small_batch.*` to `benchmark/results`; `report.py` (with `conclusion.py`) is their
part of `REPORT.md`.
"""
