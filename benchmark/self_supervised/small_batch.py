"""Where synchronised batch norm should matter: 2 and 4 images per replica.

Synchronised batch norm is used in practice where each device holds 1-4
images (detection, high-resolution training; MegDet). This runs
`benchmark.self_supervised.quality`'s experiment in that regime: SimSiam and SimCLR,
per-replica batches of 2 and 4 (global batches of 8 and 16 over 4 replicas),
under its three settings ((a) per-replica batch norm on 4 replicas, (b)
synchronised batch norm on 4 replicas, (c) one device holding the global
batch), three seeds, the same weights, images and augmentations in every
setting of a seed. The paired differences (a) - (c) and (b) - (c) per seed
cancel most of the seed-to-seed noise. As there, the data is the package's
glyphs by default (`--data digits` for the scikit-learn digits), trained
backbones are evaluated after recomputing their batch-norm statistics from
the clean training images (precise BN), and the untrained backbone as built.

The supervised metric loss in the same regime (global vs per-replica mining,
synchronised vs per-replica batch norm) is `benchmark.metric.small_batch`.

Results go to `<out>/ssl_small_batch.md` and `<out>/ssl_small_batch.json`
(`benchmark/results` for a full run, a new temporary folder for `--quick`);
`python -m benchmark.report` adds them, with plots, to `REPORT.md`. Every option of
`quality.py` is accepted and overrides the presets here.

Usage (from the repository root):

    python -m benchmark.self_supervised.small_batch          # full run: 1 epoch, ~15 min, 2 cores
    python -m benchmark.self_supervised.small_batch --quick  # smoke run: SimCLR, 1 seed, 256 images
    python -m benchmark.self_supervised.small_batch --epochs 4 --seeds 5
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from benchmark.self_supervised import quality

NAME = "ssl_small_batch"
MODULE = "benchmark.self_supervised.small_batch"
BATCH_SIZES = (2, 4)
ALGORITHMS = ("simsiam", "simclr")
# Four times the steps per epoch of quality.py's batches of 8 and 32: one epoch of the
# glyphs' 2,140 training images (267 steps at 2 per replica) keeps the run near 15 minutes
# on 2 cores.
EPOCHS = 1


def presets(argv: Sequence[str]) -> list[str]:
    """`quality.py` options of this regime; a `--quick` run keeps its own algorithm."""
    options = ["--batch-sizes", *(str(b) for b in BATCH_SIZES)]
    if "--quick" not in argv:
        options += ["--algorithms", *ALGORITHMS, "--epochs", str(EPOCHS)]
    return options


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv if argv is None else argv)
    return quality.main(argv, name=NAME, module=MODULE, forwarded=presets(argv[1:]))


if __name__ == "__main__":
    main()
