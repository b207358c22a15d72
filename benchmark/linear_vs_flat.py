"""LinearSearch, the exact default backend, against faiss IndexFlatIP: lookup time and memory.

Question: is `LinearSearch("cosine")`'s `batch_lookup` within `TARGET_TIME`x of
faiss' exhaustive `IndexFlatIP` (on the same unit rows) in lookup time, and within
`TARGET_MEMORY`x in peak memory, at `--counts` 128-d float32 embeddings, `--queries`
queries, `k` neighbours?

- Time: both indexes are built in one process and searched in turn, `--repeats`
  times (faiss, then ours); the ratio of each turn is ours over faiss, and the
  verdict is the median ratio: the CPU is shared, so only times taken together
  compare. Then again, in another process, with one thread each (faiss' OpenMP,
  OpenBLAS): the shared cores disturb those times less (faiss' OpenMP threads wait
  for each other). The two agree on the neighbours (`agreement`: the fraction of ours
  that faiss found too; ties and the last bits of the products may swap a few).
- Memory: each backend in a fresh process (`VmHWM` of `/proc/self/status`):
  its peak resident memory once the embeddings are added (`--chunk` rows at a
  time, as a stream) and once the queries are answered, each less the
  process's resident memory after its imports (TensorFlow, for ours).

Embeddings and queries are isotropic Gaussian rows divided by their norms,
generated from the seed in chunks, the same in every process.

Run: `python -m benchmark.linear_vs_flat` (10^6 and 2 * 10^5 rows; `--quick` for a
smoke run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.common import command_line, machine_record, markdown_table, output_folder
from benchmark.common import write_results as write_results_files
from benchmark.phases import status_mb

NAME = "linear_vs_flat"
TARGET_TIME = 1.2
TARGET_MEMORY = 1.3
BACKENDS = ("faiss", "linear")
# faiss' OpenMP threads and OpenBLAS' (NumPy's and faiss'): one thread each, times that
# waiting for the shared cores disturbs less.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def unit_rows(count: int, dim: int, seed: int, chunk: int) -> Iterator[np.ndarray]:
    """`count` Gaussian rows divided by their norms, `chunk` at a time, from `seed`."""
    for number, start in enumerate(range(0, count, chunk)):
        rows = np.random.default_rng([seed, number]).standard_normal(
            (min(chunk, count - start), dim), dtype=np.float32
        )
        yield rows / np.linalg.norm(rows, axis=1, keepdims=True)


def build(backend: str, a: dict[str, Any]) -> Any:
    """The `backend`'s index holding the data set's rows, added `a["chunk"]` at a time."""
    stream = unit_rows(a["count"], a["dim"], a["seed"], a["chunk"])
    if backend == "faiss":
        import faiss

        index = faiss.IndexFlatIP(a["dim"])
        for rows in stream:
            index.add(rows)
        return index
    from tensorflow_similarity.search import LinearSearch

    index = LinearSearch("cosine", dim=a["dim"])
    added = 0
    for rows in stream:
        index.batch_add(rows, np.arange(added, added + len(rows)))
        added += len(rows)
    return index


def search(backend: str, index: Any, queries: np.ndarray, k: int) -> np.ndarray:
    """The `[n, k]` positions of the queries' nearest rows (ids are positions)."""
    if backend == "faiss":
        return index.search(queries, k)[1]
    return index.batch_lookup(queries, k)[0]


def the_queries(a: dict[str, Any]) -> np.ndarray:
    return next(unit_rows(a["queries"], a["dim"], a["seed"] + 1_000_003, a["queries"]))


def phase_time(a: dict[str, Any]) -> dict[str, Any]:
    """Both backends in this process, searched in turn `a["repeats"]` times."""
    queries = the_queries(a)
    indexes = {backend: build(backend, a) for backend in BACKENDS}
    for backend in BACKENDS:  # warm-up: first calls load kernels and touch the pages
        search(backend, indexes[backend], queries[:8], a["k"])
    seconds: dict[str, list[float]] = {backend: [] for backend in BACKENDS}
    found = {}
    for _ in range(a["repeats"]):
        for backend in BACKENDS:
            begin = time.perf_counter()
            found[backend] = search(backend, indexes[backend], queries, a["k"])
            seconds[backend].append(time.perf_counter() - begin)
    ratios = [o / f for o, f in zip(seconds["linear"], seconds["faiss"], strict=True)]
    pairs = zip(found["linear"], found["faiss"], strict=True)
    agreement = np.mean([len(set(o) & set(f)) / a["k"] for o, f in pairs])
    return {
        "faiss_s": seconds["faiss"],
        "linear_s": seconds["linear"],
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "agreement": float(agreement),
    }


def phase_memory(a: dict[str, Any]) -> dict[str, Any]:
    """One backend's peak resident memory above its start, added and queried."""
    if a["backend"] == "faiss":
        import faiss  # noqa: F401
    else:
        import tensorflow_similarity.search  # noqa: F401
    queries = the_queries(a)
    start_mb = status_mb("VmRSS")
    index = build(a["backend"], a)
    add_mb = status_mb("VmHWM")
    search(a["backend"], index, queries, a["k"])
    return {
        "start_mb": start_mb,
        "add_growth_mb": add_mb - start_mb,
        "query_growth_mb": status_mb("VmHWM") - start_mb,
    }


PHASES = {"time": phase_time, "memory": phase_memory}


def run_phase(
    phase: str, arguments: dict[str, Any], timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Runs `phase` in a fresh Python process (`env` added to its environment)."""
    command = [sys.executable, "-m", "benchmark.linear_vs_flat", "--phase", phase]
    done = subprocess.run(
        [*command, "--phase-args", json.dumps(arguments)],
        env={**os.environ, **(env or {})},
        check=True,
        timeout=timeout,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(count: int, args: argparse.Namespace) -> dict[str, Any]:
    arguments = {
        "count": count,
        "dim": args.dim,
        "queries": args.queries,
        "k": args.k,
        "seed": args.seed,
        "chunk": args.chunk,
        "repeats": args.repeats,
    }
    row: dict[str, Any] = {"count": count, "time": run_phase("time", arguments, args.timeout)}
    row["time_one_thread"] = run_phase("time", arguments, args.timeout, ONE_THREAD)
    for backend in BACKENDS:
        row[backend] = run_phase("memory", {**arguments, "backend": backend}, args.timeout)
    row["memory_ratio"] = row["linear"]["query_growth_mb"] / row["faiss"]["query_growth_mb"]
    print(f"  {count:,} rows: {json.dumps(row)}", flush=True)
    return row


def verdicts(payload: dict[str, Any]) -> list[str]:
    lines = []
    for row in payload["rows"]:
        time_ratio, memory_ratio = row["time"]["median_ratio"], row["memory_ratio"]
        lines.append(
            f"- {row['count']:,} rows: lookup time {time_ratio:.2f}x faiss' "
            f"({'<=' if time_ratio <= TARGET_TIME else '>'} {TARGET_TIME}x -> "
            f"{'met' if time_ratio <= TARGET_TIME else 'NOT met'}; one thread each: "
            f"{row['time_one_thread']['median_ratio']:.2f}x); peak memory growth "
            f"{memory_ratio:.2f}x ({'<=' if memory_ratio <= TARGET_MEMORY else '>'} "
            f"{TARGET_MEMORY}x -> {'met' if memory_ratio <= TARGET_MEMORY else 'NOT met'})"
        )
    return lines


def render_markdown(payload: dict[str, Any]) -> str:
    lines = [
        f"# LinearSearch against faiss IndexFlatIP: {payload['dim']}-d, cosine\n",
        f"{payload['machine']}, load average {payload['load_average']:.1f} (the CPU is "
        f"shared: only times taken together compare); faiss {payload['faiss']}; "
        f"{payload['queries']:,} queries, k={payload['k']}, unit Gaussian rows added "
        f"{payload['chunk']:,} at a time. Lookup times: both indexes in one process, "
        f"searched in turn {payload['repeats']} times; the ratio is ours over faiss', its "
        "median the verdict's; again with one thread each (OpenMP and OpenBLAS), which "
        "waiting for the shared cores disturbs less. Memory: each backend in its own "
        "process, peak resident memory (`VmHWM`) less the resident memory after its "
        "imports.\n",
    ]
    if payload.get("note"):
        lines.append(payload["note"] + "\n")
    table = []
    for row in payload["rows"]:
        t = row["time"]
        table.append(
            [
                f"{row['count']:,}",
                " / ".join(f"{s:.2f}" for s in t["faiss_s"]),
                " / ".join(f"{s:.2f}" for s in t["linear_s"]),
                f"{t['median_ratio']:.2f}",
                f"{row['time_one_thread']['median_ratio']:.2f}",
                f"{t['agreement']:.4f}",
                f"{row['faiss']['add_growth_mb']:,.0f} / {row['faiss']['query_growth_mb']:,.0f}",
                f"{row['linear']['add_growth_mb']:,.0f} / {row['linear']['query_growth_mb']:,.0f}",
                f"{row['memory_ratio']:.2f}",
            ]
        )
    header = [
        "rows",
        "faiss s",
        "LinearSearch s",
        "median time ratio",
        "one thread each",
        f"agreement@{payload['k']}",
        "faiss MiB (added / queried)",
        "LinearSearch MiB (added / queried)",
        "memory ratio",
    ]
    lines.append(markdown_table(header, table) + "\n")
    lines.append("Verdicts:\n")
    lines += payload["verdicts"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=100_000, help="rows per add")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--note", default="", help="a line for the report")
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--phase-args", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        print(json.dumps(PHASES[args.phase](json.loads(args.phase_args))))
        return
    if args.quick:
        args.counts, args.queries, args.chunk = [20_000], 100, 5_000
    import faiss

    out = output_folder(args.out, args.quick, NAME)
    out.mkdir(parents=True, exist_ok=True)
    passed = list(argv if argv is not None else sys.argv[1:])
    payload: dict[str, Any] = {
        **machine_record(),
        "command": command_line("benchmark.linear_vs_flat", passed),
        "faiss": faiss.__version__,
        "dim": args.dim,
        "queries": args.queries,
        "k": args.k,
        "repeats": args.repeats,
        "chunk": args.chunk,
        "quick": args.quick,
        "note": args.note,
        "rows": [],
    }
    for count in args.counts:
        payload["rows"].append(measure(count, args))
    payload["verdicts"] = verdicts(payload)
    print(write_results_files(out, NAME, payload, render_markdown))


if __name__ == "__main__":
    main()
