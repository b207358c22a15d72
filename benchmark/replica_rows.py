"""Per-replica cost of a global-batch loss: every row of the global batch, or only its own.

Before `GlobalBatchLoss` computed each replica's own rows, every replica of `K`
computed the loss of all `N` rows of the global batch (SimCLR's `[N, 2N]`
logits, the metric losses' `[N, N]` distances), and divided it by `K`. Now a
replica computes the `N / K` rows of its own samples against the `N` keys
gathered from every replica. This benchmark measures what one replica
executes in each case, loss and gradients, for SimCLR and MultiSimilarity at
global batches of 1,024 and 4,096 and `K` = 1, 2, 4, 8: the median time of a
call and the peak memory of its tensors (TensorFlow's CPU allocator in BFC
mode, which keeps statistics). Each row runs in its own process, on one CPU
device; the collectives themselves (an all-gather of `N x d` values) are not
timed. "All rows" does not depend on `K`: it is measured once per loss and
batch and shown on every `K`.

    python -m benchmark.replica_rows            # N = 1,024 and 4,096; K = 1, 2, 4, 8
    python -m benchmark.replica_rows --quick    # smoke run (N = 128), into a temporary folder
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmark.common import REPO_ROOT, RESULTS_DIR, markdown_table

LOSSES = ("simclr", "multisimilarity")
REPLICAS = (1, 2, 4, 8)
DIM = 128
CLASS_SIZE = 4


def measure_one(loss_name: str, batch: int, rows: int, repeats: int, seed: int) -> dict:
    """Runs in a child process: one replica's loss and gradients for `rows` of `batch` queries."""
    import numpy as np
    import tensorflow as tf

    from tensorflow_similarity.l2_normalize import l2_normalize
    from tensorflow_similarity.losses import MultiSimilarityLoss, SimCLRLoss

    rng = np.random.default_rng(seed)
    z1 = tf.constant(rng.normal(size=(batch, DIM)).astype("float32"))
    z2 = tf.constant(rng.normal(size=(batch, DIM)).astype("float32"))
    labels = tf.constant(np.repeat(np.arange(batch // CLASS_SIZE), CLASS_SIZE), tf.int64)
    if loss_name == "simclr":
        loss = SimCLRLoss()

        def terms(keys1, keys2):
            k1, k2 = l2_normalize(keys1, axis=1), l2_normalize(keys2, axis=1)
            # A replica's own rows are the first keys (`collectives.gather_keys`).
            return 0.5 * (
                loss._anchor_terms(k1[:rows], k1, k2) + loss._anchor_terms(k2[:rows], k2, k1)
            )
    else:
        loss = MultiSimilarityLoss()

        def terms(keys1, keys2):
            return loss.per_anchor_loss(labels[:rows], keys1[:rows], labels, keys1)

    @tf.function
    def step(keys1, keys2):
        with tf.GradientTape() as tape:
            tape.watch([keys1, keys2])
            value = tf.reduce_sum(terms(keys1, keys2)) / batch
        gradients = tape.gradient(value, [keys1, keys2], unconnected_gradients="zero")
        return value, gradients

    step(z1, z2)  # trace and warm up
    tf.config.experimental.reset_memory_stats("CPU:0")
    base = tf.config.experimental.get_memory_info("CPU:0")["current"]
    seconds = []
    for _ in range(repeats):
        start = _now()
        value, gradients = step(z1, z2)
        _ = value.numpy(), [g.numpy() for g in gradients]
        seconds.append(_now() - start)
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - base
    return {"seconds": float(np.median(seconds)), "peak_mib": peak / 2**20}


def _now() -> float:
    import time

    return time.perf_counter()


def run_child(loss_name: str, batch: int, rows: int, repeats: int, seed: int) -> dict:
    """Measures one configuration in a fresh process (its own allocator statistics)."""
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    args = [loss_name, str(batch), str(rows), str(repeats), str(seed)]
    result = subprocess.run(
        [sys.executable, "-m", "benchmark.replica_rows", "--child", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"measuring {args} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(batches: list[int], repeats: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for loss_name in LOSSES:
        for batch in batches:
            every = run_child(loss_name, batch, batch, repeats, seed)
            for k in REPLICAS:
                own = every if k == 1 else run_child(loss_name, batch, batch // k, repeats, seed)
                row = {
                    "loss": loss_name,
                    "global_batch": batch,
                    "replicas": k,
                    "all_rows_seconds": every["seconds"],
                    "own_rows_seconds": own["seconds"],
                    "all_rows_peak_mib": every["peak_mib"],
                    "own_rows_peak_mib": own["peak_mib"],
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def render_markdown(payload: dict[str, Any]) -> str:
    """The table of one replica's loss time and peak memory, all rows against own rows."""
    header = [
        "loss",
        "global batch",
        "replicas K",
        "time, all rows (ms)",
        "time, own rows (ms)",
        "time ratio",
        "peak, all rows (MiB)",
        "peak, own rows (MiB)",
        "peak ratio",
    ]
    table = []
    for row in payload["rows"]:
        table.append(
            [
                row["loss"],
                f"{row['global_batch']:,}",
                row["replicas"],
                f"{1000 * row['all_rows_seconds']:.1f}",
                f"{1000 * row['own_rows_seconds']:.1f}",
                f"{row['own_rows_seconds'] / row['all_rows_seconds']:.2f}",
                f"{row['all_rows_peak_mib']:.1f}",
                f"{row['own_rows_peak_mib']:.1f}",
                f"{row['own_rows_peak_mib'] / row['all_rows_peak_mib']:.2f}",
            ]
        )
    return "\n".join(
        [
            "# One replica's loss and gradients: all rows of the global batch, or its own\n",
            f"{payload['machine']}, TensorFlow {payload['tensorflow']}, {payload['date']}; "
            f"embeddings of {payload['dim']} float32 values, median of "
            f'{payload["repeats"]} calls, each row measured in its own process. "All rows" '
            "is what every replica computed before each replica computed only its own rows "
            '(`N` queries against `N` keys, whatever `K`); "own rows" is `N / K` queries '
            "against the `N` gathered keys. A ratio of `1 / K` is the quadratic part "
            "falling with the replicas.\n",
            markdown_table(header, table),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> Path | None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        name, batch, rows, repeats, seed = argv[1:]
        print(json.dumps(measure_one(name, int(batch), int(rows), int(repeats), int(seed))))
        return None
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--batches", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    args = parser.parse_args(argv)
    if args.quick:
        args.batches, args.repeats = [128], 1
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="replica_rows_")) if args.quick else RESULTS_DIR
    import tensorflow as tf

    payload = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "load_average": os.getloadavg()[0],
        "tensorflow": tf.__version__,
        "dim": DIM,
        "repeats": args.repeats,
        "quick": args.quick,
        "rows": measure(args.batches, args.repeats, args.seed),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "replica_rows.json").write_text(json.dumps(payload, indent=2) + "\n")
    (args.out / "replica_rows.md").write_text(render_markdown(payload))
    print(render_markdown(payload))
    print(f"wrote {args.out / 'replica_rows.json'} and {args.out / 'replica_rows.md'}")
    return args.out


if __name__ == "__main__":
    main()
