"""What global-batch mining and synchronised batch norm do to metric losses.

`python -m benchmark.metric.losses` (cost and quality of global vs per-replica mining) and
`python -m benchmark.metric.small_batch` (2 and 4 images per replica) write
`metric_losses.*` and `metric_small_batch.*` to `benchmark/results`.
"""
