"""Benchmark of the index's evaluation verbs' peak memory against the number of queries.

A small index (`--index-size` clustered `--dim`-d embeddings of `--classes`
classes, cosine distance, the default `Indexer`) measures `--queries` query
counts drawn alike, each verb in a fresh process: `evaluate_retrieval`
(`recall@1`, `precision@5`), `evaluate_classification` (F1 at 64 thresholds,
k=1) and `calibrate` (k=1, every distinct distance a threshold). The figure
is the peak resident memory during the call above the resident memory
before it (`VmHWM` after resetting it through `/proc/self/clear_refs`,
minus `VmRSS`), so the queries themselves, made before, are not counted.

Target: `evaluate_retrieval` and `evaluate_classification` take the same
peak whatever the number of queries (within 1.2x and 16 MiB of the smallest
count); `calibrate` keeps a flag and a distance per query and returns a row
per distinct distance, so its peak grows by a few tens of bytes per query
(reported). Results go to `<out>/index_evaluation_memory.json` and `.md`.

Usage (from the repository root; Linux, for `/proc`):

    python -m benchmark.index_evaluation_memory           # 100,000 and 1,000,000 queries
    python -m benchmark.index_evaluation_memory --quick   # 10,000 and 40,000, temporary folder
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.common import (
    command_line,
    machine_record,
    markdown_table,
    output_folder,
    write_results,
)
from tensorflow_similarity.indexer import Indexer
from tensorflow_similarity.retrieval_metrics import PrecisionAtK, RecallAtK

NAME = "index_evaluation_memory"
MODULE = f"benchmark.{NAME}"
VERBS = ("evaluate_retrieval", "evaluate_classification", "calibrate")
MIB = 2**20


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}: this benchmark needs Linux.")


def _data(rng: np.random.Generator, centres: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, len(centres), size=n)
    noise = rng.normal(size=(n, centres.shape[1]))
    return (centres[labels] + noise).astype(np.float32), labels


def measure(
    verb: str, queries: int, index_size: int, dim: int, classes: int, seed: int
) -> dict[str, Any]:
    """One verb over `queries` queries in this process: its extra peak memory and seconds."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, dim)) * 1.5
    x, y = _data(rng, centres, index_size)
    index = Indexer(embedding_size=dim, distance="cosine")
    index.batch_add(x, y, verbose=0)
    query_x, query_y = _data(rng, centres, queries)
    # Warm-up: the search's first call builds what it keeps, which is not the evaluation's.
    index.evaluate_retrieval(query_x[:8], query_y[:8], [RecallAtK(k=1)], verbose=0)
    calls = {
        "evaluate_retrieval": lambda: index.evaluate_retrieval(
            query_x, query_y, [RecallAtK(k=1), PrecisionAtK(k=5)], verbose=0
        ),
        "evaluate_classification": lambda: index.evaluate_classification(
            query_x, query_y, np.linspace(0.0, 1.0, 64), k=1, verbose=0
        ),
        "calibrate": lambda: index.calibrate(query_x, query_y, {"0.9": 0.9}, verbose=0),
    }
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to the current resident memory
    before = _status_bytes("VmRSS")
    start = time.perf_counter()
    calls[verb]()
    seconds = time.perf_counter() - start
    peak = _status_bytes("VmHWM") - before
    return {
        "verb": verb,
        "queries": queries,
        "extra_peak_mib": round(peak / MIB, 1),
        "bytes_per_query": round(peak / queries, 1),
        "seconds": round(seconds, 2),
    }


def _measure_in_child(verb: str, queries: int, settings: dict[str, int]) -> dict[str, Any]:
    child = [sys.executable, "-m", MODULE, "--child", verb, "--queries", str(queries)]
    for name, value in settings.items():
        child += [f"--{name.replace('_', '-')}", str(value)]
    done = subprocess.run(child, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def verdicts(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per verb: whether its peak held from the smallest to the largest count."""
    lines = []
    for verb in VERBS:
        mine = sorted((r for r in rows if r["verb"] == verb), key=lambda r: r["queries"])
        if len(mine) < 2:
            continue
        few, many = mine[0], mine[-1]
        growth = (many["extra_peak_mib"] - few["extra_peak_mib"]) * MIB
        per_query = growth / (many["queries"] - few["queries"])
        if verb == "calibrate":
            lines.append(
                f"calibrate: {few['extra_peak_mib']} MiB at {few['queries']:,} queries, "
                f"{many['extra_peak_mib']} MiB at {many['queries']:,}: "
                f"{per_query:.0f} bytes per extra query."
            )
            continue
        held = many["extra_peak_mib"] <= 1.2 * few["extra_peak_mib"] + 16
        lines.append(
            f"{verb}: {few['extra_peak_mib']} MiB at {few['queries']:,} queries, "
            f"{many['extra_peak_mib']} MiB at {many['queries']:,}: "
            + ("target met." if held else "target missed (grows with the queries).")
        )
    return lines


def render_markdown(payload: dict[str, Any]) -> str:
    """The results as a table and the verdicts."""
    rows = [
        [r["verb"], f"{r['queries']:,}", r["extra_peak_mib"], r["bytes_per_query"], r["seconds"]]
        for r in payload["rows"]
    ]
    header = ["verb", "queries", "extra peak (MiB)", "bytes per query", "seconds"]
    settings = payload["settings"]
    return "\n".join(
        [
            "# Index evaluation: peak memory against the number of queries",
            "",
            f"{payload['date']}, {payload['machine']} (load {payload['load_average']:.1f}); "
            f"index of {settings['index_size']:,} {settings['dim']}-d embeddings, "
            f"{settings['classes']} classes; `{payload['command']}`.",
            "",
            markdown_table(header, rows),
            "",
            *[f"- {line}" for line in payload["verdicts"]],
        ]
    )


def run(
    queries: Sequence[int],
    index_size: int,
    dim: int,
    classes: int,
    seed: int,
    quick: bool,
    out: Path,
    in_process: bool = False,
) -> dict[str, Any]:
    """Measures every verb at every count (each in a fresh process unless `in_process`)."""
    settings = {"index_size": index_size, "dim": dim, "classes": classes, "seed": seed}
    rows = []
    for count in queries:
        for verb in VERBS:
            row = (
                measure(verb, count, **settings)
                if in_process
                else _measure_in_child(verb, count, settings)
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
    payload = {
        **machine_record(),
        "command": command_line(MODULE, ["--quick"] if quick else []),
        "quick": quick,
        "settings": settings,
        "rows": rows,
        "verdicts": verdicts(rows),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_results(out, NAME, payload, render_markdown)
    return payload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, nargs="+", default=None)
    parser.add_argument("--index-size", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", choices=VERBS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        row = measure(
            args.child, args.queries[0], args.index_size, args.dim, args.classes, args.seed
        )
        print(json.dumps(row))
        return
    queries = args.queries or ([10_000, 40_000] if args.quick else [100_000, 1_000_000])
    out = output_folder(args.out, args.quick, NAME)
    payload = run(queries, args.index_size, args.dim, args.classes, args.seed, args.quick, out)
    print(render_markdown(payload))


if __name__ == "__main__":
    main()
