"""Serving an index beyond the in-graph limit: `export_model(index_location="external")`.

Question: an index larger than `serving.MAX_INDEX_BYTES` (1 GiB of index
arrays) cannot go into the exported `lookup` signature; exported with
`index_location="external"` it is saved beside the `embed` signature and
served by `serving.IndexServer`. How long do the export, the server's load
and its lookups take, how much memory do they hold, and does the server
answer what an exact search answers?

A `SimilarityModel` with a `--dim` input and a `Dense(--dim)` embedding
(cosine; random weights, no downloads) indexes `--count` random Gaussian
inputs (default 2,200,000: 128-d float32 embeddings, over the limit) with
random integer labels among `--classes`, streamed to `model.index` in chunks
of `CHUNK` generated from the seed, so the inputs are never all in memory.
Each `--search`:

- `linear`: the default `LinearSearch` and `MemoryStore` (everything in
  memory);
- `faiss_ondisk`: `FaissOnDiskSearch` (`--nlist` cells, trained on the first
  `40 * nlist` embeddings; the default `nprobe`) and `MemmapStore`, both in
  files (the export then holds the inverted lists and the store's columns).

Three phases run per search, each in a fresh process, which reports its peak
resident memory (`VmHWM` of `/proc/self/status`) and its resident memory
once its libraries are imported:

1. build: index, then `model.export_serving(path, index_location="external")`:
   seconds of each, and the bytes the export takes on disk;
2. serve: `IndexServer(path)` (seconds) and two `lookup`s of `--queries`
   queries (seconds each: the first also traces `embed`); for
   `faiss_ondisk` one more lookup with `nprobe = nlist`, which searches
   every cell and so is exact;
3. reference: float64 NumPy, the inputs regenerated chunk by chunk through
   the model's weights (saved by the build), the exact cosine `k` nearest
   of each query, and the labels and distances of the ids the server gave.

The run fails (and writes nothing) unless the server's exact lookup (the
`linear` one, the `faiss_ondisk` one with every cell searched) returns the
reference's ids (a swap of two neighbours whose float64 distances agree to
`TIE` is a tie, counted and allowed), its distances agree with the
reference's to `DISTANCE_TOLERANCE`, and its labels and class names are
those indexed. For `faiss_ondisk` the default `nprobe`'s recall@k against
the reference is reported.

Results go to `<out>/serving_external.json` and `<out>/serving_external.md`.

Usage (from the repository root):

    python -m benchmark.serving_external            # LinearSearch, 2.2M items: minutes, ~3 GB RAM
    python -m benchmark.serving_external --search linear faiss_ondisk   # + ~10 min, ~6 GB disk
    python -m benchmark.serving_external --quick    # both, 20,000 items, into a temporary folder
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmark import phases
from benchmark.common import (
    REPO_ROOT,
    command_line,
    machine_record,
    markdown_table,
    output_folder,
)
from benchmark.common import write_results as write_results_files
from benchmark.phases import folder_bytes, status_mb

NAME = "serving_external"
CHUNK = 100_000
SEARCHES = ("linear", "faiss_ondisk")
QUERY_STREAM = 1_000_003
# float32 embeddings and distances against a float64 reference.
DISTANCE_TOLERANCE = 1e-4
TIE = 1e-5
MIB = 2**20


def inputs(
    count: int, dim: int, classes: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The `count` indexed inputs and their labels, `CHUNK` at a time, the same in every process."""
    for number, start in enumerate(range(0, count, CHUNK)):
        rng = np.random.default_rng([seed, number])
        size = min(CHUNK, count - start)
        yield rng.standard_normal((size, dim), dtype=np.float32), rng.integers(0, classes, size)


def queries(num: int, dim: int, seed: int) -> np.ndarray:
    """`num` query inputs, from another stream than the indexed ones."""
    return np.random.default_rng([seed, QUERY_STREAM]).standard_normal((num, dim), np.float32)


def class_names(classes: int) -> list[str]:
    return [f"class_{label}" for label in range(classes)]


# Phases, each run in its own process by `run_phase`.


def phase_build(a: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    from tensorflow_similarity.models import SimilarityModel
    from tensorflow_similarity.search import FaissOnDiskSearch
    from tensorflow_similarity.stores import MemmapStore

    start_mb = status_mb("VmRSS")
    work = Path(a["work"])
    keras.utils.set_random_seed(a["seed"])
    x = keras.Input((a["dim"],))
    model = SimilarityModel(x, keras.layers.Dense(a["dim"])(x))
    kernel, bias = model.get_weights()
    np.savez(work / "weights.npz", kernel=kernel, bias=bias)
    if a["search"] == "faiss_ondisk":
        search = FaissOnDiskSearch(
            "cosine", dim=a["dim"], nlist=a["nlist"], directory=work / "lists"
        )
        model.compile(distance="cosine", search=search, kv_store=MemmapStore(work / "store"))
    else:
        model.compile(distance="cosine")
    begin = time.perf_counter()
    model.index(inputs(a["count"], a["dim"], a["classes"], a["seed"]), verbose=0)
    index_s = time.perf_counter() - begin
    index_mb = status_mb("VmHWM")
    if model.index_size() != a["count"]:
        raise RuntimeError(f"indexed {model.index_size():,} items, not {a['count']:,}")
    served = work / "served"
    begin = time.perf_counter()
    export = model.export_serving(
        served,
        k=a["k"],
        class_names=class_names(a["classes"]),
        index_location="external",
        verbose=0,
    )
    export_s = time.perf_counter() - begin
    if export.signatures != ("embed",) or export.index_location != "external":
        raise RuntimeError(f"the export is not external: {export}")
    return {
        "rss_start_mb": start_mb,
        "index_s": index_s,
        "peak_index_mb": index_mb,
        "export_s": export_s,
        "peak_mb": status_mb("VmHWM"),
        "export_bytes": folder_bytes(served),
        "index_folder_bytes": folder_bytes(served / "index"),
    }


def phase_serve(a: dict[str, Any]) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from tensorflow_similarity.serving import IndexServer

    start_mb = status_mb("VmRSS")
    work = Path(a["work"])
    begin = time.perf_counter()
    server = IndexServer(work / "served")
    load_s = time.perf_counter() - begin
    load_mb = status_mb("VmHWM")
    q = queries(a["queries"], a["dim"], a["seed"])
    times = []
    for _ in range(2):
        begin = time.perf_counter()
        found = server.lookup(q)
        times.append(time.perf_counter() - begin)
    result = {
        "rss_start_mb": start_mb,
        "load_s": load_s,
        "peak_load_mb": load_mb,
        "first_lookup_s": times[0],
        "lookup_s": times[1],
        "peak_mb": status_mb("VmHWM"),
    }
    answers = {"ids": found["ids"].numpy()}
    if a["search"] == "faiss_ondisk":
        result["nprobe"] = server.index.search.nprobe
        server.index.search.nprobe = server.index.search.nlist
        begin = time.perf_counter()
        found = server.lookup(q)
        result["exact_lookup_s"] = time.perf_counter() - begin
    answers.update(
        exact_ids=found["ids"].numpy(),
        distances=found["distances"].numpy(),
        labels=found["labels"].numpy(),
        label_names=np.array(
            [[name.decode() for name in row] for row in found["label_names"].numpy()], str
        ).reshape(found["ids"].shape),
    )
    np.savez(work / "served.npz", **answers)
    return result


def phase_reference(a: dict[str, Any]) -> dict[str, Any]:
    """Exact cosine neighbours in float64, and the labels and distances of the served ids."""
    work = Path(a["work"])
    weights = np.load(work / "weights.npz")
    kernel, bias = weights["kernel"].astype(np.float64), weights["bias"].astype(np.float64)

    def embed(x: np.ndarray) -> np.ndarray:
        e = x.astype(np.float64) @ kernel + bias
        return e / np.linalg.norm(e, axis=1, keepdims=True)

    served = np.load(work / "served.npz")["exact_ids"]
    q = embed(queries(a["queries"], a["dim"], a["seed"]))
    k = served.shape[1]
    best_d = np.full((len(q), 0), np.inf)
    best_i = np.zeros((len(q), 0), np.int64)
    served_d = np.full(served.shape, np.nan)
    served_labels = np.full(served.shape, -1, np.int64)
    start = 0
    for x, y in inputs(a["count"], a["dim"], a["classes"], a["seed"]):
        d = 1.0 - q @ embed(x).T
        ids = np.arange(start, start + len(x))
        d = np.concatenate([best_d, d], axis=1)
        i = np.concatenate([best_i, np.broadcast_to(ids, (len(q), len(ids)))], axis=1)
        keep = np.argsort(d, axis=1, kind="stable")[:, :k]
        best_d, best_i = np.take_along_axis(d, keep, 1), np.take_along_axis(i, keep, 1)
        inside = (served >= start) & (served < start + len(x))
        rows, columns = np.nonzero(inside)
        served_d[rows, columns] = 1.0 - np.sum(
            q[rows] * embed(x[served[rows, columns] - start]), axis=1
        )
        served_labels[inside] = y[served[inside] - start]
        start += len(x)
    np.savez(
        work / "reference.npz",
        ids=best_i,
        distances=best_d,
        served_distances=served_d,
        served_labels=served_labels,
    )
    return {"peak_mb": status_mb("VmHWM")}


PHASES = {"build": phase_build, "serve": phase_serve, "reference": phase_reference}


def run_phase(phase: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Runs `phase` in a fresh Python process; returns what it measured."""
    return phases.run_phase("benchmark.serving_external", phase, arguments, timeout)


def check_answers(work: Path, classes: int) -> dict[str, Any]:
    """Compares the server's exact answers with the reference; raises where they differ."""
    served, reference = np.load(work / "served.npz"), np.load(work / "reference.npz")
    ids, expected = served["exact_ids"], reference["ids"]
    served_d = reference["served_distances"]
    problems = []
    if np.isnan(served_d).any():
        problems.append("ids outside the indexed range")
    elif not np.allclose(np.sort(served_d, axis=1), reference["distances"], atol=TIE, rtol=0):
        worst = np.max(np.abs(np.sort(served_d, axis=1) - reference["distances"]))
        problems.append(f"neighbours that are not the nearest (distance off by {worst:.2e})")
    if np.any(np.diff(served["distances"], axis=1) < 0):
        problems.append("neighbours out of order")
    gap = float(np.max(np.abs(served["distances"] - served_d)))
    if gap > DISTANCE_TOLERANCE:
        problems.append(f"distances off by {gap:.2e} from float64 ones")
    if not np.array_equal(served["labels"], reference["served_labels"]):
        problems.append("labels that are not the indexed ones")
    names = np.array(class_names(classes))[reference["served_labels"]]
    if not np.array_equal(served["label_names"], names):
        problems.append("label_names that are not the class names of the labels")
    if problems:
        raise AssertionError(
            f"IndexServer's exact lookup disagrees with the float64 NumPy search: it returned "
            f"{'; '.join(problems)}. Files in {work}."
        )
    k = ids.shape[1]
    pairs = zip(served["ids"], expected, strict=True)
    recall = np.mean([len(set(found) & set(exact)) / k for found, exact in pairs])
    return {
        "checked_queries": len(ids),
        "ids_equal": int(np.sum(ids == expected)),
        "ties_swapped": int(np.sum(ids != expected)),
        "max_distance_gap": gap,
        "recall": float(recall),
    }


def measure(search: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    folder = work / search
    folder.mkdir()
    arguments = {
        "search": search,
        "count": args.count,
        "dim": args.dim,
        "classes": args.classes,
        "queries": args.queries,
        "k": args.k,
        "nlist": args.nlist,
        "seed": args.seed,
        "work": str(folder),
    }
    row: dict[str, Any] = {"search": search}
    for phase in PHASES:
        row[phase] = run_phase(phase, arguments, args.timeout)
    row["check"] = check_answers(folder, args.classes)
    print(f"  check: {json.dumps(row['check'])}", flush=True)
    return row


def render_markdown(payload: dict[str, Any]) -> str:
    names = {
        "linear": "LinearSearch + MemoryStore",
        "faiss_ondisk": "FaissOnDiskSearch + MemmapStore",
    }
    index_mib = payload["count"] * payload["dim"] * 4 / MIB
    lines = [
        f"# Serving an index beyond the limit: {payload['count']:,} items, IndexServer\n",
        f"{payload['date']}, {payload['machine']}, load average {payload['load_average']:.1f} "
        f"(the CPU is shared: times are indicative); TensorFlow {payload['tensorflow']}, "
        f"commit {payload['commit']}. "
        f'`model.export_serving(path, index_location="external")` of a `Dense` embedding of '
        f"{payload['dim']} dimensions, cosine, {payload['count']:,} items with labels among "
        f"{payload['classes']:,} class names: {index_mib:,.0f} MiB of embeddings, "
        f"{'over' if index_mib * MIB > payload['max_index_bytes'] else 'within'} the "
        f"{payload['max_index_bytes'] / MIB:,.0f} MiB an in-graph `lookup` may hold. "
        f"`IndexServer(path).lookup` of {payload['queries']} queries, k={payload['k']}; "
        "the first lookup also traces `embed`. Each phase runs in a fresh process: peak is "
        "its `VmHWM`, start its resident memory once TensorFlow is imported. "
        f"FaissOnDiskSearch: nlist={payload['nlist']}, trained on the first "
        f"{40 * payload['nlist']:,} embeddings.\n",
    ]
    if payload.get("note"):
        lines.append(payload["note"] + "\n")
    moved = [
        f"{row['search']} {phase} at {row[phase]['commit']}"
        for row in payload["rows"]
        for phase in PHASES
        if row[phase].get("commit", payload["commit"]) != payload["commit"]
    ]
    if moved:
        lines.append(f"The package changed during the run: {'; '.join(moved)}.\n")
    if any(row["search"] == "faiss_ondisk" for row in payload["rows"]):
        lines.append(
            "The inputs are random Gaussian, so the embeddings have no clusters for the IVF "
            "cells to find: FaissOnDiskSearch's recall at its default nprobe is that of such "
            "data (`index_scale` measures clustered embeddings). Its export holds the inverted "
            "lists, which keep room to grow, and the store's columns.\n"
        )
    table = []
    for row in payload["rows"]:
        build, serve, check = row["build"], row["serve"], row["check"]
        table.append(
            [
                names[row["search"]],
                f"{build['index_s']:.0f}",
                f"{build['export_s']:.1f}",
                f"{build['export_bytes'] / MIB:,.0f}",
                f"{build['peak_mb']:,.0f}",
                f"{serve['load_s']:.1f}",
                f"{serve['first_lookup_s']:.2f}",
                f"{serve['lookup_s']:.2f}",
                f"{serve['rss_start_mb']:,.0f}",
                f"{serve['peak_mb']:,.0f}",
                f"{check['recall']:.3f}",
            ]
        )
    lines.append(
        markdown_table(
            [
                "search",
                "index s",
                "export s",
                "export on disk MiB",
                "peak building MiB",
                "load s",
                "first lookup s",
                "lookup s",
                "serving start MiB",
                "peak serving MiB",
                f"recall@{payload['k']}",
            ],
            table,
        )
        + "\n"
    )
    lines.append(
        "Checked against a float64 NumPy exact search (the build's weights, inputs "
        "regenerated from the seed):\n"
    )
    for row in payload["rows"]:
        check = row["check"]
        how = (
            f"with nprobe = nlist (every cell, {row['serve']['exact_lookup_s']:.1f} s; the "
            f"table's recall is the default nprobe={row['serve']['nprobe']}'s)"
            if row["search"] == "faiss_ondisk"
            else "as served"
        )
        lines.append(
            f"- {names[row['search']]}, {how}: {check['checked_queries']} queries, "
            f"{check['ids_equal']:,} of {check['ids_equal'] + check['ties_swapped']:,} ids "
            f"equal ({check['ties_swapped']} ties swapped), distances within "
            f"{check['max_distance_gap']:.1e}, labels and class names equal."
        )
    return "\n".join(lines) + "\n"


def source_commit() -> str:
    """The checkout's commit, marked `+changes` when the package's files differ from it."""

    def git(*command: str) -> str:
        return subprocess.run(
            ["git", *command], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--", "tensorflow_similarity")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + (" +changes" if changed else "")


def default_nlist(count: int) -> int:
    """About `4 * sqrt(count)` as a power of 2, small enough that `count` items train it."""
    nlist = 2 ** round(math.log2(4 * math.sqrt(count)))
    while nlist > 1 and 40 * nlist > count:
        nlist //= 2
    return nlist


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2_200_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--classes", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=32)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--search", nargs="+", choices=SEARCHES, default=["linear"])
    parser.add_argument(
        "--nlist", type=int, default=None, help="FaissOnDiskSearch's cells; about 4 * sqrt(count)"
    )
    parser.add_argument("--note", default="", help="a sentence the results keep")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--phase-args", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        arguments = json.loads(args.phase_args)
        commit = source_commit()
        result = {**PHASES[args.phase](arguments), "commit": commit}
        (Path(arguments["work"]) / f"{args.phase}.json").write_text(json.dumps(result))
        return
    if args.quick:
        args.count, args.search = 20_000, list(SEARCHES)
    if args.nlist is None:
        args.nlist = default_nlist(args.count)
    if 40 * args.nlist > args.count:
        parser.error(
            f"--nlist {args.nlist} needs {40 * args.nlist:,} items to train on; "
            f"--count is {args.count:,}. Pass a smaller --nlist."
        )
    import tensorflow as tf

    from tensorflow_similarity.serving import MAX_INDEX_BYTES

    out = output_folder(args.out, args.quick, NAME)
    out.mkdir(parents=True, exist_ok=True)
    passed = list(argv if argv is not None else sys.argv[1:])
    payload: dict[str, Any] = {
        **machine_record(),
        "command": command_line("benchmark.serving_external", passed),
        "tensorflow": tf.__version__,
        "commit": source_commit(),
        "count": args.count,
        "dim": args.dim,
        "classes": args.classes,
        "queries": args.queries,
        "k": args.k,
        "nlist": args.nlist,
        "max_index_bytes": MAX_INDEX_BYTES,
        "quick": args.quick,
        "note": args.note,
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix=f"{NAME}_", dir=os.environ.get("TMPDIR")) as work:
        for search in args.search:
            print(f"{search}, {args.count:,} items:", flush=True)
            payload["rows"].append(measure(search, args, Path(work)))
    print(write_results_files(out, NAME, payload, render_markdown))


if __name__ == "__main__":
    main()
