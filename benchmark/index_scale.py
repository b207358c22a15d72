"""Search beyond memory: FaissOnDiskSearch against faiss used directly, at one large size.

Question: can an index of `--count` 128-d embeddings be built and searched with a
peak resident memory that does not grow with the index, and at what recall and
speed? Compared side by side, on clustered embeddings (`--clusters` random
Gaussian centres, noise a third of their scale, as `benchmark.index`) and on
isotropic Gaussian ones, cosine distance:

- `faiss IndexFlatIP`: exact, faiss used directly; its results are the ground
  truth of recall@k.
- `faiss IVF on disk`: the same IVF-Flat as ours (`nlist` cells trained on the
  first `40 * nlist` embeddings, `faiss.OnDiskInvertedLists`), faiss used
  directly: no release of the mapped pages.
- `FaissOnDiskSearch`: ours, through the public `Search` API.
- `LinearSearch`: the exact default backend, through the public `Search` API.

Every phase (adding; loading and querying) runs in a fresh process, so that
its peak resident memory (`VmHWM` of `/proc/self/status`, which counts the
mapped file pages faiss touches) is its own; `rss_start_mb` is the process's
resident memory once its libraries are imported, before any work. The
embeddings are generated in chunks from the seed in every process, never held
whole (except by the exact backends, which keep them in memory).

Run: `python -m benchmark.index_scale` (10^6 embeddings; `--quick` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmark.common import command_line, machine_record, markdown_table, output_folder
from benchmark.common import write_results as write_results_files

NAME = "index_scale"
CHUNK = 100_000
NPROBES = (1, 4, 16, 64, 256)
TARGET_RECALL = 0.95
TARGET_PEAK_MB = 2048


def status_mb(key: str) -> float:
    """A memory figure of this process from `/proc/self/status`, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


def chunks(kind: str, count: int, dim: int, clusters: int, seed: int) -> Iterator[np.ndarray]:
    """The `count` embeddings of a data set, `CHUNK` at a time, the same in every process."""
    centres = np.random.default_rng(seed).normal(size=(clusters, dim)).astype(np.float32)
    for number, start in enumerate(range(0, count, CHUNK)):
        rng = np.random.default_rng([seed, number])
        size = min(CHUNK, count - start)
        noise = rng.standard_normal((size, dim), dtype=np.float32)
        if kind == "gaussian":
            yield noise
        else:
            yield centres[rng.integers(0, clusters, size)] + noise / 3


def queries(kind: str, num: int, dim: int, clusters: int, seed: int) -> np.ndarray:
    """`num` queries drawn like the data set's embeddings, from another stream."""
    return next(chunks(kind, num, dim, clusters, seed + 1_000_003))


def normalised(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean over queries of the fraction of the exact `k` neighbours found."""
    k = exact.shape[1]
    return float(np.mean([len(set(f) & set(e)) / k for f, e in zip(found, exact, strict=True)]))


def folder_bytes(path: Path) -> int:
    """The bytes the files of `path` take on disk (allocated blocks: files may be sparse)."""
    return sum(f.stat().st_blocks * 512 for f in path.iterdir() if f.is_file())


# Phases, each run in its own process by `run_phase`.


def phase_exact_faiss(a: dict[str, Any]) -> dict[str, Any]:
    import faiss

    start_mb = status_mb("VmRSS")
    index = faiss.IndexFlatIP(a["dim"])
    begin = time.perf_counter()
    for chunk in chunks(a["kind"], a["count"], a["dim"], a["clusters"], a["seed"]):
        index.add(normalised(chunk))
    add_s = time.perf_counter() - begin
    add_mb = status_mb("VmHWM")
    q = normalised(queries(a["kind"], a["queries"], a["dim"], a["clusters"], a["seed"]))
    begin = time.perf_counter()
    _, exact = index.search(q, a["k"])
    query_s = time.perf_counter() - begin
    np.save(Path(a["work"]) / f"exact_{a['kind']}.npy", exact)
    return {
        "rss_start_mb": start_mb,
        "add_s": add_s,
        "peak_add_mb": add_mb,
        "qps": len(q) / query_s,
        "peak_query_mb": status_mb("VmHWM"),
        "recall": 1.0,
    }


def phase_ivf_faiss_add(a: dict[str, Any]) -> dict[str, Any]:
    import faiss

    start_mb = status_mb("VmRSS")
    folder = Path(a["work"]) / "faiss_ivf"
    folder.mkdir(exist_ok=True)
    begin = time.perf_counter()
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(a["dim"]), a["dim"], a["nlist"], 1)
    seen = 0
    stream = chunks(a["kind"], a["count"], a["dim"], a["clusters"], a["seed"])
    # The first 40 * nlist embeddings train it, as FaissOnDiskSearch does.
    held = []
    for chunk in stream:
        held.append(normalised(chunk))
        seen += len(chunk)
        if seen >= 40 * a["nlist"]:
            break
    train = np.concatenate(held)[: 40 * a["nlist"]]
    index.train(train)
    train_s = time.perf_counter() - begin
    lists = faiss.OnDiskInvertedLists(index.nlist, index.code_size, str(folder / "lists.ivfdata"))
    index.replace_invlists(lists, True)
    lists.this.disown()
    ids = 0
    for chunk in [*held, *(normalised(c) for c in stream)]:
        index.add_with_ids(chunk, np.arange(ids, ids + len(chunk), dtype=np.int64))
        ids += len(chunk)
    del held, train
    add_s = time.perf_counter() - begin
    add_mb = status_mb("VmHWM")
    begin = time.perf_counter()
    faiss.write_index(index, str(folder / "index.faiss"))
    return {
        "rss_start_mb": start_mb,
        "train_s": train_s,
        "add_s": add_s,
        "peak_add_mb": add_mb,
        "save_s": time.perf_counter() - begin,
        "disk_bytes": folder_bytes(folder),
    }


def phase_ivf_faiss_query(a: dict[str, Any]) -> dict[str, Any]:
    import faiss

    start_mb = status_mb("VmRSS")
    folder = Path(a["work"]) / "faiss_ivf"
    begin = time.perf_counter()
    index = faiss.read_index(
        str(folder / "index.faiss"), faiss.IO_FLAG_ONDISK_SAME_DIR | faiss.IO_FLAG_READ_ONLY
    )
    load_s = time.perf_counter() - begin
    q = normalised(queries(a["kind"], a["queries"], a["dim"], a["clusters"], a["seed"]))
    exact = np.load(Path(a["work"]) / f"exact_{a['kind']}.npy")
    sweep = {}
    for nprobe in a["nprobes"]:
        index.nprobe = nprobe
        begin = time.perf_counter()
        _, found = index.search(q, a["k"])
        sweep[nprobe] = {
            "qps": len(q) / (time.perf_counter() - begin),
            "recall": recall_at_k(found, exact),
        }
    return {
        "rss_start_mb": start_mb,
        "load_s": load_s,
        "peak_query_mb": status_mb("VmHWM"),
        "sweep": sweep,
    }


def phase_ours_add(a: dict[str, Any]) -> dict[str, Any]:
    from tensorflow_similarity.search import FaissOnDiskSearch

    start_mb = status_mb("VmRSS")
    work = Path(a["work"])
    search = FaissOnDiskSearch(
        "cosine", dim=a["dim"], nlist=a["nlist"], directory=work / "ours_working"
    )
    begin, ids = time.perf_counter(), 0
    for chunk in chunks(a["kind"], a["count"], a["dim"], a["clusters"], a["seed"]):
        search.batch_add(chunk, np.arange(ids, ids + len(chunk)))
        ids += len(chunk)
    add_s = time.perf_counter() - begin
    add_mb = status_mb("VmHWM")
    begin = time.perf_counter()
    search.save(work / "ours")
    return {
        "rss_start_mb": start_mb,
        "add_s": add_s,
        "peak_add_mb": add_mb,
        "save_s": time.perf_counter() - begin,
        "disk_bytes": folder_bytes(work / "ours"),
        "default_nprobe": search.nprobe,
    }


def phase_ours_query(a: dict[str, Any]) -> dict[str, Any]:
    from tensorflow_similarity.search import FaissOnDiskSearch

    start_mb = status_mb("VmRSS")
    work = Path(a["work"])
    search = FaissOnDiskSearch("cosine", dim=a["dim"], nlist=a["nlist"])
    begin = time.perf_counter()
    search.load(work / "ours")
    load_s = time.perf_counter() - begin
    q = queries(a["kind"], a["queries"], a["dim"], a["clusters"], a["seed"])
    exact = np.load(work / f"exact_{a['kind']}.npy")
    sweep = {}
    for nprobe in a["nprobes"]:
        search.nprobe = nprobe
        begin = time.perf_counter()
        found, _ = search.batch_lookup(q, k=a["k"])
        sweep[nprobe] = {
            "qps": len(q) / (time.perf_counter() - begin),
            "recall": recall_at_k(found, exact),
        }
    return {
        "rss_start_mb": start_mb,
        "load_s": load_s,
        "peak_query_mb": status_mb("VmHWM"),
        "sweep": sweep,
    }


def phase_linear(a: dict[str, Any]) -> dict[str, Any]:
    from tensorflow_similarity.search import LinearSearch

    start_mb = status_mb("VmRSS")
    work = Path(a["work"])
    search = LinearSearch("cosine", dim=a["dim"])
    begin, ids = time.perf_counter(), 0
    for chunk in chunks(a["kind"], a["count"], a["dim"], a["clusters"], a["seed"]):
        search.batch_add(chunk, np.arange(ids, ids + len(chunk)))
        ids += len(chunk)
    add_s = time.perf_counter() - begin
    add_mb = status_mb("VmHWM")
    q = queries(a["kind"], a["queries"], a["dim"], a["clusters"], a["seed"])
    begin = time.perf_counter()
    found, _ = search.batch_lookup(q, k=a["k"])
    qps = len(q) / (time.perf_counter() - begin)
    begin = time.perf_counter()
    search.save(work / "linear")
    save_s = time.perf_counter() - begin
    return {
        "rss_start_mb": start_mb,
        "add_s": add_s,
        "peak_add_mb": add_mb,
        "qps": qps,
        "recall": recall_at_k(found, np.load(work / f"exact_{a['kind']}.npy")),
        "peak_query_mb": status_mb("VmHWM"),
        "save_s": save_s,
        "disk_bytes": folder_bytes(work / "linear"),
    }


PHASES = {
    "exact_faiss": phase_exact_faiss,
    "ivf_faiss_add": phase_ivf_faiss_add,
    "ivf_faiss_query": phase_ivf_faiss_query,
    "ours_add": phase_ours_add,
    "ours_query": phase_ours_query,
    "linear": phase_linear,
}


def run_phase(phase: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Runs `phase` in a fresh Python process; returns what it measured."""
    out = Path(arguments["work"]) / f"{phase}.json"
    command = [
        sys.executable,
        "-m",
        "benchmark.index_scale",
        "--phase",
        phase,
        "--phase-args",
        json.dumps(arguments),
    ]
    begin = time.perf_counter()
    subprocess.run(command, check=True, timeout=timeout, stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    print(f"  {phase}: {time.perf_counter() - begin:.0f} s {json.dumps(result)}", flush=True)
    return result


def measure(kind: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    arguments = {
        "kind": kind,
        "count": args.count,
        "dim": args.dim,
        "clusters": args.clusters,
        "seed": args.seed,
        "queries": args.queries,
        "k": args.k,
        "nlist": args.nlist,
        "nprobes": list(args.nprobes),
        "work": str(work),
    }
    row: dict[str, Any] = {"data": kind}
    row["faiss_exact"] = run_phase("exact_faiss", arguments, args.timeout)
    row["faiss_ivf"] = {
        **run_phase("ivf_faiss_add", arguments, args.timeout),
        **run_phase("ivf_faiss_query", arguments, args.timeout),
    }
    row["ours"] = {
        **run_phase("ours_add", arguments, args.timeout),
        **run_phase("ours_query", arguments, args.timeout),
    }
    if not args.skip_linear:
        row["linear"] = run_phase("linear", arguments, args.timeout)
    for folder in ("faiss_ivf", "ours", "ours_working", "linear"):
        shutil.rmtree(work / folder, ignore_errors=True)
    return row


def verdicts(payload: dict[str, Any]) -> list[str]:
    lines = []
    for row in payload["rows"]:
        ours = row["ours"]
        default = ours["sweep"][str(ours["default_nprobe"])]
        peak = max(ours["peak_add_mb"], ours["peak_query_mb"])
        recall = (
            f"recall@{payload['k']} at the default nprobe={ours['default_nprobe']}: "
            f"{default['recall']:.3f}"
        )
        if row["data"] == "clustered":
            recall += f" >= {TARGET_RECALL} -> " + (
                "met" if default["recall"] >= TARGET_RECALL else "NOT met"
            )
        else:
            recall += " (no target: isotropic Gaussian embeddings have no cells to find)"
        lines.append(
            f"- {row['data']}, {payload['count']:,} embeddings: FaissOnDiskSearch peak RSS "
            f"{peak:,.0f} MiB (adding {ours['peak_add_mb']:,.0f}, querying "
            f"{ours['peak_query_mb']:,.0f}) < {TARGET_PEAK_MB:,} MiB -> "
            f"{'met' if peak < TARGET_PEAK_MB else 'NOT met'}; {recall}"
        )
    return lines


def render_markdown(payload: dict[str, Any]) -> str:
    k, count = payload["k"], payload["count"]
    lines = [
        f"# Search beyond memory: {count:,} embeddings of {payload['dim']} dimensions\n",
        f"{payload['machine']}, load average {payload['load_average']:.1f} (the CPU is "
        f"shared: times are indicative); faiss {payload['faiss']}; cosine distance; "
        f"{payload['queries']:,} queries, recall@{k} against faiss' exact IndexFlatIP; "
        f"IVF: nlist={payload['nlist']} trained on the first {40 * payload['nlist']:,} "
        "embeddings. Peak RSS is each phase's process `VmHWM` (it counts the file pages "
        "faiss maps); `start` is its RSS once its libraries are imported (TensorFlow, for "
        "the two backends of ours).\n",
    ]
    if payload.get("note"):
        lines.append(payload["note"] + "\n")
    for row in payload["rows"]:
        lines.append(f"## {row['data']} embeddings\n")
        table = []
        ex, ivf, ours = row["faiss_exact"], row["faiss_ivf"], row["ours"]
        nprobe = str(ours["default_nprobe"])
        table.append(
            [
                "faiss IndexFlatIP (exact)",
                f"{ex['add_s']:.0f}",
                f"{ex['qps']:,.0f}",
                "1.000",
                f"{ex['rss_start_mb']:,.0f}",
                f"{ex['peak_add_mb']:,.0f}",
                f"{ex['peak_query_mb']:,.0f}",
                "-",
                "-",
                "-",
            ]
        )
        for name, r in (("faiss IVF on disk, direct", ivf), ("FaissOnDiskSearch", ours)):
            table.append(
                [
                    f"{name} (nprobe={nprobe})",
                    f"{r['add_s']:.0f}",
                    f"{r['sweep'][nprobe]['qps']:,.0f}",
                    f"{r['sweep'][nprobe]['recall']:.3f}",
                    f"{r['rss_start_mb']:,.0f}",
                    f"{r['peak_add_mb']:,.0f}",
                    f"{r['peak_query_mb']:,.0f}",
                    f"{r['save_s']:.1f}",
                    f"{r['load_s']:.2f}",
                    f"{r['disk_bytes'] / 2**20:,.0f}",
                ]
            )
        if "linear" in row:
            lin = row["linear"]
            table.append(
                [
                    "LinearSearch (exact)",
                    f"{lin['add_s']:.0f}",
                    f"{lin['qps']:,.0f}",
                    f"{lin['recall']:.3f}",
                    f"{lin['rss_start_mb']:,.0f}",
                    f"{lin['peak_add_mb']:,.0f}",
                    f"{lin['peak_query_mb']:,.0f}",
                    f"{lin['save_s']:.1f}",
                    "-",
                    f"{lin['disk_bytes'] / 2**20:,.0f}",
                ]
            )
        lines.append(
            markdown_table(
                [
                    "backend",
                    "add s",
                    "queries/s",
                    f"recall@{k}",
                    "start MiB",
                    "peak adding MiB",
                    "peak querying MiB",
                    "save s",
                    "load s",
                    "on disk MiB",
                ],
                table,
            )
            + "\n"
        )
        sweep_rows = [
            [
                p,
                f"{ivf['sweep'][p]['recall']:.3f}",
                f"{ivf['sweep'][p]['qps']:,.0f}",
                f"{ours['sweep'][p]['recall']:.3f}",
                f"{ours['sweep'][p]['qps']:,.0f}",
            ]
            for p in ours["sweep"]
        ]
        lines.append(f"nprobe sweep ({row['data']}):\n")
        lines.append(
            markdown_table(
                [
                    "nprobe",
                    f"faiss recall@{k}",
                    "faiss queries/s",
                    f"ours recall@{k}",
                    "ours queries/s",
                ],
                sweep_rows,
            )
            + "\n"
        )
    lines.append("Verdicts:\n")
    lines += payload["verdicts"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=1_000, help="of the clustered set")
    parser.add_argument(
        "--nlist",
        type=int,
        default=None,
        help="IVF cells; defaults to 4 * sqrt(count), rounded to a power of 2",
    )
    parser.add_argument("--nprobes", type=int, nargs="+", default=list(NPROBES))
    parser.add_argument(
        "--data", nargs="+", default=["clustered", "gaussian"], choices=["clustered", "gaussian"]
    )
    parser.add_argument("--skip-linear", action="store_true", help="leave LinearSearch out")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--phase-args", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        arguments = json.loads(args.phase_args)
        result = PHASES[args.phase](arguments)
        (Path(arguments["work"]) / f"{args.phase}.json").write_text(json.dumps(result))
        return
    if args.quick:
        args.count, args.queries, args.clusters = 20_000, 100, 50
    if args.nlist is None:
        args.nlist = 2 ** round(math.log2(4 * math.sqrt(args.count)))
    from tensorflow_similarity.search.faiss_ondisk_search import DEFAULT_NPROBE as default_nprobe

    args.nprobes = sorted({p for p in [*args.nprobes, default_nprobe] if p <= args.nlist})
    import faiss

    out = output_folder(args.out, args.quick, NAME)
    out.mkdir(parents=True, exist_ok=True)
    passed = list(argv if argv is not None else sys.argv[1:])
    payload: dict[str, Any] = {
        **machine_record(),
        "command": command_line("benchmark.index_scale", passed),
        "faiss": faiss.__version__,
        "count": args.count,
        "dim": args.dim,
        "queries": args.queries,
        "k": args.k,
        "clusters": args.clusters,
        "nlist": args.nlist,
        "quick": args.quick,
        "rows": [],
    }
    with tempfile.TemporaryDirectory(prefix="index_scale_", dir=os.environ.get("TMPDIR")) as w:
        for kind in args.data:
            print(f"{kind}, {args.count:,} embeddings:", flush=True)
            payload["rows"].append(measure(kind, args, Path(w)))
    payload["verdicts"] = verdicts(payload)
    print(write_results_files(out, NAME, payload, render_markdown))


if __name__ == "__main__":
    main()
