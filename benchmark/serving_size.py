"""Benchmark of an exported `lookup`'s index size: the SavedModel, its TFLite file, the limit.

An exported `lookup` holds the index's arrays as variables (the class names
as a constant in `saved_model.pb`), and its TFLite conversion freezes them
into `lookup.tflite`, a FlatBuffer, which cannot exceed 2 GiB;
`serving.MAX_INDEX_BYTES` (1 GiB of index arrays) keeps an export to half
of that. For index arrays of each `--sizes` MiB (random unit rows of
`--dim` float32, cosine; the ids, labels, norms and names of an export as
well), this measures, with the arrays given to `SimilarityServing` directly
(so that sizes past the limit reach TensorFlow):

* tracing and `tf.saved_model.save`: seconds, the size of `saved_model.pb`
  and of `variables/` (or TensorFlow's error);
* `tf.saved_model.load`, and `lookup` of `--queries` queries: seconds, of
  the first call (which also optimises the graph) and of the second;
* the `lookup` TFLite conversion (sizes up to `--tflite-max` MiB): seconds
  and bytes, or the converter's error.

`--constants` holds the arrays as graph constants instead (what the export
did first), for comparison: saved inside `saved_model.pb`, they make saving,
loading and the first `lookup` many times slower, and past 2 GiB TensorFlow
refuses to make them.

Results go to `<out>/serving_size.json` and `<out>/serving_size.md`
(`serving_size_constants.*` with `--constants`, whose default sizes stop
short of 1 GiB: on a 23 GB machine the first `lookup` of a 1 GiB constant
index was killed for memory).

Usage (from the repository root):

    python -m benchmark.serving_size            # 16 MiB to 2,100 MiB: minutes, ~10 GB RAM
    python -m benchmark.serving_size --quick    # smoke run (1 and 4 MiB), into a temporary folder
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import (  # noqa: E402
    command_line,
    machine_record,
    markdown_table,
    output_folder,
)
from tensorflow_similarity.distances import CosineDistance  # noqa: E402
from tensorflow_similarity.search import exact_nearest  # noqa: E402
from tensorflow_similarity.serving import (  # noqa: E402
    MAX_INDEX_BYTES,
    IndexSnapshot,
    SimilarityServing,
    convert_to_tflite,
)

PROTOBUF_LIMIT = 2**31 - 1
SIZES = [16, 256, 1024, 2100]
CONSTANT_SIZES = [16, 256, 2100]
MIB = 2**20


def snapshot(index_bytes: int, dim: int, seed: int) -> IndexSnapshot:
    """An index whose arrays take about `index_bytes`: unit rows, ids, labels, names."""
    size = max(1, index_bytes // (4 * dim + 4 + 8 + 8 + 1))
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((size, dim), dtype=np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    labels = np.arange(size, dtype=np.int64) % 10
    return IndexSnapshot(
        distance=CosineDistance(),
        keys=keys,
        key_norms=np.sum(np.square(keys), axis=1, keepdims=True).T,
        ids=np.arange(size, dtype=np.int64),
        labels=labels,
        label_names=np.array([str(label).encode() for label in range(10)], object)[labels],
    )


def measure(size_mib: int, args: argparse.Namespace, folder: Path) -> dict:
    index = snapshot(size_mib * MIB, args.dim, args.seed)
    row = {
        "size_mib": size_mib,
        "items": index.size,
        "index_bytes": index.nbytes,
        "within_limit": index.nbytes <= MAX_INDEX_BYTES,
    }
    path = folder / f"served_{size_mib}"
    start = time.perf_counter()
    try:
        module = (ConstantServing if args.constants else SimilarityServing)(
            tf.identity, (args.dim,), index.distance, index=index, k=min(args.k, index.size)
        )
        tf.saved_model.save(module, str(path), signatures=module.signatures())
    except Exception as error:  # noqa: BLE001 - what TensorFlow raises past the limit is the result
        row.update(saved=False, save_s=time.perf_counter() - start, error=_error_line(error))
        return row
    row.update(saved=True, save_s=time.perf_counter() - start)
    row["saved_model_pb_bytes"] = (path / "saved_model.pb").stat().st_size
    row["variables_bytes"] = sum(p.stat().st_size for p in (path / "variables").iterdir())
    del module
    gc.collect()
    start = time.perf_counter()
    served = tf.saved_model.load(str(path))
    row["load_s"] = time.perf_counter() - start
    queries = tf.constant(np.random.default_rng(1).standard_normal((args.queries, args.dim)))
    queries = tf.cast(queries, tf.float32)
    # The first call also optimises the graph (its constants included); the second is a query.
    for key in ("first_lookup_s", "lookup_s"):
        start = time.perf_counter()
        served.signatures["lookup"](images=queries)
        row[key] = time.perf_counter() - start
    del served
    gc.collect()
    if size_mib <= args.tflite_max:
        start = time.perf_counter()
        try:
            row["tflite_bytes"] = len(convert_to_tflite(path, "lookup"))
        except Exception as error:  # noqa: BLE001 - the converter's refusal is the result
            row["tflite_error"] = _error_line(error)
        row["tflite_s"] = time.perf_counter() - start
    shutil.rmtree(path)
    return row


class ConstantServing(SimilarityServing):
    """`SimilarityServing` with the index's arrays as graph constants (`--constants`)."""

    def __init__(self, embeddings, input_shape, distance, index, k):
        tf.Module.__init__(self, name="constant_serving")
        spec = tf.TensorSpec([None, *input_shape], tf.float32, name="images")

        def lookup(images):
            distances, positions = exact_nearest(
                distance,
                embeddings(images),
                tf.constant(index.keys),
                tf.constant(index.key_norms),
                k,
            )
            return {
                "ids": tf.gather(tf.constant(index.ids), positions),
                "distances": distances,
                "labels": tf.gather(tf.constant(index.labels), positions),
                "label_names": tf.gather(tf.constant(index.label_names.tolist()), positions),
            }

        self.embed = tf.function(
            lambda images: {"embeddings": embeddings(images)}
        ).get_concrete_function(spec)
        self.lookup = tf.function(lookup).get_concrete_function(spec)


def _error_line(error: BaseException) -> str:
    """The error's type and the last line of its message (a traced function's says where first)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    name = type(error).__name__
    return (last if last.startswith(name) else f"{name}: {last}")[:300]


def render_markdown(payload: dict) -> str:
    rows = payload["rows"]
    held = "graph constants (`--constants`)" if payload["constants"] else "variables"
    title = "as graph constants" if payload["constants"] else "in the exported model"
    lines = [
        f"# Serving: the index {title}",
        "",
        f"{payload['date']}, {payload['machine']}, load average {payload['load_average']:.1f}, "
        f"TensorFlow {payload['tensorflow']}. Index arrays of {payload['dim']}-d float32 unit "
        "rows (cosine) with their ids, labels, norms and class names, held as "
        f"{held}; the limit `MAX_INDEX_BYTES` is {payload['max_index_bytes'] / MIB:,.0f} MiB, "
        f"a FlatBuffer's or a protocol buffer's {payload['protobuf_limit'] / MIB:,.0f} MiB. "
        f"`lookup` of {payload['queries']} queries, k={payload['k']}.",
        "",
        markdown_table(
            [
                "index (MiB)",
                "items",
                "within limit",
                "save (s)",
                "saved_model.pb (MiB)",
                "variables/ (MiB)",
                "load (s)",
                "first lookup (s)",
                "lookup (s)",
                "lookup.tflite (MiB)",
            ],
            [
                [
                    f"{row['index_bytes'] / MIB:,.1f}",
                    f"{row['items']:,}",
                    "yes" if row["within_limit"] else "no",
                    f"{row['save_s']:.1f}",
                    f"{row['saved_model_pb_bytes'] / MIB:,.1f}" if row["saved"] else "fails",
                    f"{row['variables_bytes'] / MIB:,.1f}" if row["saved"] else "",
                    f"{row['load_s']:.1f}" if row["saved"] else "",
                    f"{row['first_lookup_s']:.1f}" if row["saved"] else "",
                    f"{row['lookup_s']:.3f}" if row["saved"] else "",
                    _tflite_cell(row),
                ]
                for row in rows
            ],
        ),
        "",
    ]
    for row in rows:
        for key in ("error", "tflite_error"):
            if key in row:
                lines.append(f"- {row['index_bytes'] / MIB:,.0f} MiB: `{row[key]}`")
    return "\n".join(lines) + "\n"


def _tflite_cell(row: dict) -> str:
    if "tflite_bytes" in row:
        return f"{row['tflite_bytes'] / MIB:,.1f}"
    return "fails" if "tflite_error" in row else "not tried"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--queries", type=int, default=32)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--tflite-max", type=int, default=1024, help="largest index converted")
    parser.add_argument("--constants", action="store_true", help="the index as graph constants")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    args = parser.parse_args()
    arguments = (["--quick"] if args.quick else []) + (["--constants"] if args.constants else [])
    if args.quick:
        args.sizes, args.tflite_max = [1, 4], 4
    name = "serving_size_constants" if args.constants else "serving_size"
    if args.constants and args.sizes == SIZES:
        args.sizes = CONSTANT_SIZES
    out = output_folder(args.out, args.quick, name)
    payload = {
        **machine_record(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "constants": args.constants,
        "command": command_line("benchmark.serving_size", arguments),
        "dim": args.dim,
        "queries": args.queries,
        "k": args.k,
        "max_index_bytes": MAX_INDEX_BYTES,
        "protobuf_limit": PROTOBUF_LIMIT,
        "quick": args.quick,
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="serving_size_") as scratch:
        for size in args.sizes:
            payload["rows"].append(measure(size, args, Path(scratch)))
            print(json.dumps(payload["rows"][-1]), flush=True)
            gc.collect()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    (out / f"{name}.md").write_text(render_markdown(payload))
    print(f"wrote {out / f'{name}.json'} and {out / f'{name}.md'}")


if __name__ == "__main__":
    main()
