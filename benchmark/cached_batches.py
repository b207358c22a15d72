"""Benchmark of cached-embedding training (`SimilarityModel(chunk_size=C)`): peak memory against C.

A small convolutional network (`--image` x `--image` x 3 inputs, `--depth`
3x3 convolutions of `--filters` filters with ReLU, global average pooling,
128-d embeddings), whose activations are large beside its weights as in
vision models, trains with `SupConLoss` on one batch of `--batch` images,
in float32, once in one pass (`chunk_size=None`)
and once per `--chunks` size, each in a fresh process. The figure is
TensorFlow's allocator statistics on the CPU
(`tf.config.experimental.get_memory_info("CPU:0")`, which TensorFlow only
keeps with its BFC allocator: the child sets `TF_CPU_ALLOCATOR_USE_BFC=true`):
the peak bytes allocated during one training step (after a first step that
traced it) above the bytes allocated before it. That covers the activations
a step holds, the loss over the whole batch (its `batch x batch`
similarities, which chunks do not shrink), the gradients and the
optimizer's temporaries; the model's weights and the batch, allocated
before, are not counted. Seconds per step are reported too (a cached step
embeds the batch twice).

Results go to `<out>/cached_batches.json` and `cached_batches.md`.

Usage (from the repository root):

    python -m benchmark.cached_batches           # batch 1,024, chunks 512 to 16
    python -m benchmark.cached_batches --quick   # batch 64, into a temporary folder
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.common import (
    command_line,
    machine_record,
    markdown_table,
    output_folder,
    write_results,
)

NAME = "cached_batches"
MODULE = f"benchmark.{NAME}"
MIB = 2**20
EMBEDDING = 128


def measure(
    chunk_size: int | None, batch: int, image: int, filters: int, depth: int, seed: int
) -> dict[str, Any]:
    """One training step's peak allocator bytes (this process must use the BFC allocator)."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tensorflow_similarity.losses import SupConLoss
    from tensorflow_similarity.models import SimilarityModel

    keras.utils.set_random_seed(seed)
    inputs = keras.Input((image, image, 3))
    h = inputs
    for _ in range(depth):
        h = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    model = SimilarityModel(inputs, keras.layers.Dense(EMBEDDING)(h), chunk_size=chunk_size)
    model.compile(keras.optimizers.SGD(learning_rate=0.01), loss=SupConLoss())
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.normal(size=(batch, image, image, 3)).astype("float32"))
    y = tf.constant(np.arange(batch) % 16)
    model.train_on_batch(x, y)  # Traces the step; its graph's memory is not the step's.
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    start = time.perf_counter()
    loss = model.train_on_batch(x, y)
    seconds = time.perf_counter() - start
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    if peak == 0:
        raise RuntimeError(
            "TensorFlow reported no CPU allocations: run with TF_CPU_ALLOCATOR_USE_BFC=true."
        )
    return {
        "chunk_size": chunk_size,
        "extra_peak_mib": round((peak - before) / MIB, 2),
        "seconds": round(seconds, 3),
        "loss": float(np.asarray(loss).ravel()[0]),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
    }


def _measure_in_child(chunk_size: int | None, settings: dict[str, int]) -> dict[str, Any]:
    child = [sys.executable, "-m", MODULE, "--child", str(chunk_size or 0)]
    for name, value in settings.items():
        child += [f"--{name}", str(value)]
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(child, capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def render_markdown(payload: dict[str, Any]) -> str:
    """The curve as a table: one pass first, then each chunk size."""
    one_pass = payload["rows"][0]["extra_peak_mib"]
    rows = [
        [
            "one pass" if r["chunk_size"] is None else r["chunk_size"],
            r["extra_peak_mib"],
            f"{r['extra_peak_mib'] / one_pass:.2f}",
            r["seconds"],
            f"{r['loss']:.6f}",
        ]
        for r in payload["rows"]
    ]
    s = payload["settings"]
    return "\n".join(
        [
            "# Cached-embedding batches: peak memory of a step against the chunk size",
            "",
            f"{payload['date']}, {payload['machine']} (load {payload['load_average']:.1f}); "
            f"batch {s['batch']} images of {s['image']}x{s['image']}x3, {s['depth']} 3x3 "
            f"convolutions of {s['filters']} filters, pooled, {EMBEDDING}-d embeddings, "
            "SupConLoss, float32, SGD; TensorFlow's CPU allocator statistics "
            f"(BFC allocator), each size in a fresh process; `{payload['command']}`.",
            "",
            markdown_table(
                ["chunk size", "extra peak (MiB)", "of one pass", "seconds / step", "loss"], rows
            ),
            "",
            "The loss is that of the same first batch after one step, so equal rows mean equal "
            "steps. The floor of the curve is what chunks do not shrink: the loss over the "
            "whole batch (its batch x batch similarities and their gradient), the embeddings "
            "and their gradient, and the weights' gradients.",
        ]
    )


def run(
    chunks: Sequence[int],
    settings: dict[str, int],
    quick: bool,
    out: Path,
) -> dict[str, Any]:
    """Measures one pass and every chunk size, each in a fresh process."""
    rows, versions = [], {}
    for chunk_size in [None, *chunks]:
        row = _measure_in_child(chunk_size, settings)
        print(json.dumps(row), flush=True)
        versions = {key: row.pop(key) for key in ("tensorflow", "keras")}
        rows.append(row)
    payload = {
        **machine_record(),
        **versions,
        "command": command_line(MODULE, ["--quick"] if quick else []),
        "quick": quick,
        "settings": settings,
        "rows": rows,
    }
    write_results(out, NAME, payload, render_markdown)
    return payload


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--chunks", type=int, nargs="+", default=None)
    parser.add_argument("--image", type=int, default=None)
    parser.add_argument("--filters", type=int, default=32)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    settings = {
        "batch": args.batch or (64 if args.quick else 1024),
        "image": args.image or (8 if args.quick else 16),
        "filters": args.filters,
        "depth": args.depth,
        "seed": args.seed,
    }
    if args.child is not None:
        print(json.dumps(measure(args.child or None, **settings)))
        return
    chunks = args.chunks or ([16, 4] if args.quick else [512, 256, 128, 64, 32, 16])
    out = output_folder(args.out, args.quick, NAME)
    payload = run(chunks, settings, args.quick, out)
    print(render_markdown(payload))


if __name__ == "__main__":
    main()
