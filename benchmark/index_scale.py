"""The index at scale: our backends against faiss used directly and Milvus Lite, at one size.

Question: can an index of `--count` 128-d embeddings be built and searched with a
peak resident memory that does not grow with the index, and at what recall and
speed? Compared side by side, on clustered embeddings (`--clusters` random
Gaussian centres, noise a third of their scale, as `benchmark.index`) and on
isotropic Gaussian ones, cosine distance:

- `faiss IndexFlatIP`: exact, faiss used directly; its results are the ground
  truth of recall@k. Also its own `write_index`/`read_index` times.
- `Indexer`: the default index a new user builds (`LinearSearch` +
  `MemoryStore`, exact): `batch_add` chunk by chunk, `save`, and in a fresh
  process `Indexer.load` and `batch_lookup` (`--skip-indexer` leaves it out).
- `faiss IVF on disk`: the same IVF-Flat as ours (`nlist` cells trained on the
  first `40 * nlist` embeddings, `faiss.OnDiskInvertedLists`), faiss used
  directly: no release of the mapped pages.
- `FaissOnDiskSearch`: ours, through the public `Search` API.
- `LinearSearch`: the exact default backend, through the public `Search` API.
- `MilvusSearch` on Milvus Lite (`--milvus-index`, IVF_FLAT by default), the
  database file in the work folder; its peak memory adds that of any process
  Milvus Lite starts. Queried with the first `--milvus-queries` queries.
- Lifecycle: each of our backends loaded from its save, 1% of the ids
  removed, another 1% upserted, `compact()`, `save`, then a lookup that must
  return no removed id (`--skip-lifecycle` leaves it out).

Every phase (adding; loading and querying) runs in a fresh process, so that
its peak resident memory (`VmHWM` of `/proc/self/status`, which counts the
mapped file pages faiss touches) is its own; `rss_start_mb` is the process's
resident memory once its libraries are imported, before any work. The
embeddings are generated in chunks from the seed in every process, never held
whole (except by the exact backends, which keep them in memory).

Run: `python -m benchmark.index_scale` (10^6 embeddings; `--quick` for a smoke run).
The 10^7 run: `python -m benchmark.index_scale --count 10000000 --data clustered
--nlist 8192 --skip-faiss-ivf --skip-linear --skip-milvus --skip-indexer`, whose
results `--name index_scale_10m` keeps apart.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmark import phases
from benchmark.common import (
    RESULTS_DIR,
    command_line,
    machine_record,
    markdown_table,
    output_folder,
)
from benchmark.common import write_results as write_results_files
from benchmark.phases import folder_bytes, status_mb

NAME = "index_scale"
CHUNK = 100_000
NPROBES = (1, 4, 16, 64, 256)
TARGET_RECALL = 0.95
TARGET_PEAK_MB = 2048
TARGET_TIME_RATIO = 1.2
TARGET_MEMORY_RATIO = 1.3
TARGET_SAVE_RATIO = 2.0


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


def tree_peak_mb() -> float:
    """The peak resident memory of this process plus that of each live descendant, in MiB.

    Milvus Lite may serve from a child process; a sum of peaks bounds the peak of the sum.
    """
    total, pending = 0.0, [os.getpid()]
    while pending:
        pid = pending.pop()
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) / 1024
            for task in Path(f"/proc/{pid}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


# Phases, each run in its own process by `run_phase`.
def add_stream(search: Any, a: dict[str, Any]) -> float:
    """Adds the data set to a `Search` chunk by chunk, ids 0, 1, ...; returns the seconds."""
    begin, ids = time.perf_counter(), 0
    for chunk in chunks(a["kind"], a["count"], a["dim"], a["clusters"], a["seed"]):
        search.batch_add(chunk, np.arange(ids, ids + len(chunk)))
        ids += len(chunk)
    return time.perf_counter() - begin


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
    result = {
        "rss_start_mb": start_mb,
        "add_s": add_s,
        "peak_add_mb": add_mb,
        "qps": len(q) / query_s,
        "peak_query_mb": status_mb("VmHWM"),
        "recall": 1.0,
    }
    if a.get("save_exact"):
        file = Path(a["work"]) / "faiss_flat.index"
        begin = time.perf_counter()
        faiss.write_index(index, str(file))
        result["save_s"] = time.perf_counter() - begin
        result["disk_bytes"] = folder_bytes(file)
    return result


def phase_exact_faiss_load(a: dict[str, Any]) -> dict[str, Any]:
    import faiss

    file = Path(a["work"]) / "faiss_flat.index"
    begin = time.perf_counter()
    index = faiss.read_index(str(file))
    load_s = time.perf_counter() - begin
    file.unlink()
    return {"load_s": load_s, "peak_load_mb": status_mb("VmHWM"), "rows": index.ntotal}


def phase_indexer_add(a: dict[str, Any]) -> dict[str, Any]:
    """The default `Indexer` (LinearSearch + MemoryStore), as a new user builds it."""
    from tensorflow_similarity.indexer import Indexer

    start_mb = status_mb("VmRSS")
    index = Indexer(embedding_size=a["dim"], distance="cosine")
    begin = time.perf_counter()
    for chunk in chunks(a["kind"], a["count"], a["dim"], a["clusters"], a["seed"]):
        index.batch_add(chunk, verbose=0)
    add_s = time.perf_counter() - begin
    add_mb = status_mb("VmHWM")
    begin = time.perf_counter()
    index.save(Path(a["work"]) / "indexer")
    return {
        "rss_start_mb": start_mb,
        "add_s": add_s,
        "peak_add_mb": add_mb,
        "save_s": time.perf_counter() - begin,
        "disk_bytes": folder_bytes(Path(a["work"]) / "indexer"),
    }


def phase_indexer_query(a: dict[str, Any]) -> dict[str, Any]:
    from tensorflow_similarity.indexer import Indexer

    start_mb = status_mb("VmRSS")
    work = Path(a["work"])
    begin = time.perf_counter()
    index = Indexer.load(work / "indexer", verbose=0)
    load_s = time.perf_counter() - begin
    load_mb = status_mb("VmHWM")
    q = queries(a["kind"], a["queries"], a["dim"], a["clusters"], a["seed"])
    begin = time.perf_counter()
    found = index.batch_lookup(q, k=a["k"], verbose=0)
    qps = len(q) / (time.perf_counter() - begin)
    ids = np.array([[lookup.id for lookup in row] for row in found])
    return {
        "rss_start_mb": start_mb,
        "load_s": load_s,
        "peak_load_mb": load_mb,
        "qps": qps,
        "recall": recall_at_k(ids, np.load(work / f"exact_{a['kind']}.npy")),
        "peak_query_mb": status_mb("VmHWM"),
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
    # Saved into its own working folder: no copy of the lists (as a large index would be).
    search = FaissOnDiskSearch("cosine", dim=a["dim"], nlist=a["nlist"], directory=work / "ours")
    add_s = add_stream(search, a)
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
    add_s = add_stream(search, a)
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


def milvus_search(a: dict[str, Any]) -> Any:
    """The benchmark's MilvusSearch on a Milvus Lite file in the work folder."""
    from tensorflow_similarity.search import MilvusSearch

    return MilvusSearch(
        "cosine",
        dim=a["dim"],
        uri=str(Path(a["work"]) / "milvus" / "lite.db"),
        collection="index_scale",
        index_type=a["milvus_index"],
        timeout=600.0,
        batch_size=a["milvus_batch"],
    )


def phase_milvus_add(a: dict[str, Any]) -> dict[str, Any]:
    import tensorflow_similarity.search  # noqa: F401  (imported before the start figure)

    start_mb = status_mb("VmRSS")
    work = Path(a["work"])
    (work / "milvus").mkdir(exist_ok=True)
    search = milvus_search(a)
    add_s = add_stream(search, a)
    add_mb = tree_peak_mb()
    begin = time.perf_counter()
    search.save(work / "milvus_saved")
    return {
        "rss_start_mb": start_mb,
        "index_type": a["milvus_index"],
        "add_s": add_s,
        "peak_add_mb": add_mb,
        "save_s": time.perf_counter() - begin,
        "disk_bytes": folder_bytes(work / "milvus"),
    }


def phase_milvus_query(a: dict[str, Any]) -> dict[str, Any]:
    import tensorflow_similarity.search  # noqa: F401  (imported before the start figure)

    start_mb = status_mb("VmRSS")
    work = Path(a["work"])
    search = milvus_search(a)
    begin = time.perf_counter()
    search.load(work / "milvus_saved")
    load_s = time.perf_counter() - begin
    q = queries(a["kind"], a["queries"], a["dim"], a["clusters"], a["seed"])[: a["milvus_queries"]]
    exact = np.load(work / f"exact_{a['kind']}.npy")[: len(q)]
    begin = time.perf_counter()
    found, _ = search.batch_lookup(q, k=a["k"])
    qps = len(q) / (time.perf_counter() - begin)
    return {
        "rss_start_mb": start_mb,
        "load_s": load_s,
        "queries": len(q),
        "qps": qps,
        "recall": recall_at_k(found, exact),
        "peak_query_mb": tree_peak_mb(),
    }


def open_saved(backend: str, a: dict[str, Any]) -> Any:
    """A search of `backend` loaded from the folder its add phase saved."""
    work = Path(a["work"])
    if backend == "milvus":
        search = milvus_search(a)
        search.load(work / "milvus_saved")
        return search
    if backend == "ours":
        from tensorflow_similarity.search import FaissOnDiskSearch

        # Loaded as its own working folder: changed in place, no copy of the lists.
        search = FaissOnDiskSearch(
            "cosine", dim=a["dim"], nlist=a["nlist"], directory=work / "ours"
        )
        search.load(work / "ours")
        return search
    from tensorflow_similarity.search import LinearSearch

    search = LinearSearch("cosine", dim=a["dim"])
    search.load(work / "linear")
    return search


def phase_lifecycle(a: dict[str, Any]) -> dict[str, Any]:
    """Removes 1% of the ids, upserts another 1%, compacts and saves; then looks up."""
    import tensorflow_similarity.search  # noqa: F401  (imported before the start figure)

    backend, count = a["backend"], a["count"]
    start_mb = status_mb("VmRSS")
    search = open_saved(backend, a)
    removed = np.arange(0, count, 100, dtype=np.int64)
    upserted = np.arange(50, count, 100, dtype=np.int64)
    vectors = next(chunks(a["kind"], len(upserted), a["dim"], a["clusters"], a["seed"] + 7))
    times = {}
    for step, call in (
        ("remove", lambda: search.remove(removed)),
        ("upsert", lambda: search.upsert(vectors, upserted)),
        ("compact", search.compact),
    ):
        begin = time.perf_counter()
        call()
        times[f"{step}_s"] = time.perf_counter() - begin
    begin = time.perf_counter()
    saved = {"milvus": "milvus_saved", "ours": "ours"}.get(backend, f"{backend}_after")
    search.save(Path(a["work"]) / saved)
    times["save_s"] = time.perf_counter() - begin
    q = queries(a["kind"], a["queries"], a["dim"], a["clusters"], a["seed"])[: a["milvus_queries"]]
    found, _ = search.batch_lookup(q, k=a["k"])
    return {
        "rss_start_mb": start_mb,
        "removed": len(removed),
        "upserted": len(upserted),
        **times,
        "size_after": search.size(),
        "removed_ids_returned": int(np.isin(found, removed).sum()),
        "peak_mb": tree_peak_mb(),
    }


PHASES = {
    "exact_faiss": phase_exact_faiss,
    "exact_faiss_load": phase_exact_faiss_load,
    "indexer_add": phase_indexer_add,
    "indexer_query": phase_indexer_query,
    "ivf_faiss_add": phase_ivf_faiss_add,
    "ivf_faiss_query": phase_ivf_faiss_query,
    "ours_add": phase_ours_add,
    "ours_query": phase_ours_query,
    "linear": phase_linear,
    "milvus_add": phase_milvus_add,
    "milvus_query": phase_milvus_query,
    "lifecycle": phase_lifecycle,
}


def run_phase(phase: str, arguments: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Runs `phase` in a fresh Python process; returns what it measured."""
    return phases.run_phase("benchmark.index_scale", phase, arguments, timeout)


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
        "milvus_index": args.milvus_index,
        "milvus_batch": args.milvus_batch,
        "milvus_queries": min(args.milvus_queries, args.queries),
        "work": str(work),
    }
    row: dict[str, Any] = {"data": kind}
    row["faiss_exact"] = run_phase(
        "exact_faiss", {**arguments, "save_exact": not args.skip_indexer}, args.timeout
    )
    if not args.skip_indexer:
        row["faiss_exact"].update(run_phase("exact_faiss_load", arguments, args.timeout))
        row["indexer"] = {
            **run_phase("indexer_add", arguments, args.timeout),
            **run_phase("indexer_query", arguments, args.timeout),
        }
        shutil.rmtree(work / "indexer", ignore_errors=True)
    if not args.skip_faiss_ivf:
        row["faiss_ivf"] = {
            **run_phase("ivf_faiss_add", arguments, args.timeout),
            **run_phase("ivf_faiss_query", arguments, args.timeout),
        }
        shutil.rmtree(work / "faiss_ivf", ignore_errors=True)
    row["ours"] = {
        **run_phase("ours_add", arguments, args.timeout),
        **run_phase("ours_query", arguments, args.timeout),
    }
    backends = ["ours"]
    if not args.skip_linear:
        row["linear"] = run_phase("linear", arguments, args.timeout)
        backends.append("linear")
    if not args.skip_milvus:
        row["milvus"] = {
            **run_phase("milvus_add", arguments, args.timeout),
            **run_phase("milvus_query", arguments, args.timeout),
        }
        backends.append("milvus")
    if not args.skip_lifecycle:
        row["lifecycle"] = {
            backend: run_phase("lifecycle", {**arguments, "backend": backend}, args.timeout)
            for backend in backends
        }
    for folder in (
        "ours",
        "ours_working",
        "ours_lifecycle",
        "ours_after",
        "linear",
        "linear_after",
        "milvus",
        "milvus_saved",
    ):
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
            reaching = [
                (int(p), r) for p, r in ours["sweep"].items() if r["recall"] >= TARGET_RECALL
            ]
            if reaching and default["recall"] < TARGET_RECALL:
                nprobe, r = min(reaching)
                recall += (
                    f"; met from nprobe={nprobe} ({r['recall']:.3f} at {r['qps']:,.0f} queries/s)"
                )
        else:
            recall += " (no target: isotropic Gaussian embeddings have no cells to find)"
        lines.append(
            f"- {row['data']}, {payload['count']:,} embeddings: FaissOnDiskSearch peak RSS "
            f"{peak:,.0f} MiB (adding {ours['peak_add_mb']:,.0f}, querying "
            f"{ours['peak_query_mb']:,.0f}) < {TARGET_PEAK_MB:,} MiB -> "
            f"{'met' if peak < TARGET_PEAK_MB else 'NOT met'}; {recall}"
        )
        ex = row["faiss_exact"]
        if "indexer" in row and "save_s" in ex:
            ix = row["indexer"]
            time_ratio = ex["qps"] / ix["qps"]
            memory_ratio = ix["peak_query_mb"] / ex["peak_query_mb"]
            grown_ratio = (ix["peak_query_mb"] - ix["rss_start_mb"]) / (
                ex["peak_query_mb"] - ex["rss_start_mb"]
            )
            save_ratio, load_ratio = ix["save_s"] / ex["save_s"], ix["load_s"] / ex["load_s"]
            lines.append(
                f"- {row['data']}: the default Indexer against faiss IndexFlatIP: lookups "
                f"{time_ratio:.2f}x its time (<= {TARGET_TIME_RATIO} -> "
                f"{'met' if time_ratio <= TARGET_TIME_RATIO else 'NOT met'}); peak memory "
                f"{memory_ratio:.3f}x, {grown_ratio:.3f}x above each process's start (TensorFlow "
                f"alone is {ix['rss_start_mb']:,.0f} MiB) (<= {TARGET_MEMORY_RATIO} -> "
                f"{'met' if memory_ratio <= TARGET_MEMORY_RATIO else 'NOT met'}, above the start "
                f"{'met' if grown_ratio <= TARGET_MEMORY_RATIO else 'NOT met'}); save "
                f"{save_ratio:.1f}x and load {load_ratio:.1f}x faiss' own (<= "
                f"{TARGET_SAVE_RATIO} -> "
                f"{'met' if max(save_ratio, load_ratio) <= TARGET_SAVE_RATIO else 'NOT met'})"
            )
        if "linear" in row:
            lin_ratio = ex["qps"] / row["linear"]["qps"]
            lines.append(
                f"- {row['data']}: LinearSearch lookups {lin_ratio:.2f}x faiss IndexFlatIP's time "
                f"(<= {TARGET_TIME_RATIO} -> "
                f"{'met' if lin_ratio <= TARGET_TIME_RATIO else 'NOT met'})"
            )
    return lines


def render_markdown(payload: dict[str, Any]) -> str:
    k, count = payload["k"], payload["count"]
    lines = [
        f"# The index at scale: {count:,} embeddings of {payload['dim']} dimensions\n",
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
        ex, ivf, ours = row["faiss_exact"], row.get("faiss_ivf"), row["ours"]
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
                f"{ex['save_s']:.1f}" if "save_s" in ex else "-",
                f"{ex['load_s']:.2f}" if "load_s" in ex else "-",
                f"{ex['disk_bytes'] / 2**20:,.0f}" if "disk_bytes" in ex else "-",
            ]
        )
        if "indexer" in row:
            ix = row["indexer"]
            table.append(
                [
                    "Indexer, default (LinearSearch + MemoryStore)",
                    f"{ix['add_s']:.0f}",
                    f"{ix['qps']:,.0f}",
                    f"{ix['recall']:.3f}",
                    f"{ix['rss_start_mb']:,.0f}",
                    f"{ix['peak_add_mb']:,.0f}",
                    f"{ix['peak_query_mb']:,.0f}",
                    f"{ix['save_s']:.1f}",
                    f"{ix['load_s']:.2f}",
                    f"{ix['disk_bytes'] / 2**20:,.0f}",
                ]
            )
        approximate = [("faiss IVF on disk, direct", ivf)] if ivf else []
        for name, r in [*approximate, ("FaissOnDiskSearch", ours)]:
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
        if "milvus" in row:
            mil = row["milvus"]
            table.append(
                [
                    f"MilvusSearch on Milvus Lite ({mil['index_type']}, {mil['queries']} queries)",
                    f"{mil['add_s']:.0f}",
                    f"{mil['qps']:,.1f}",
                    f"{mil['recall']:.3f}",
                    f"{mil['rss_start_mb']:,.0f}",
                    f"{mil['peak_add_mb']:,.0f}",
                    f"{mil['peak_query_mb']:,.0f}",
                    f"{mil['save_s']:.2f}",
                    f"{mil['load_s']:.2f}",
                    f"{mil['disk_bytes'] / 2**20:,.0f}",
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
        faiss_columns = [f"faiss recall@{k}", "faiss queries/s"] if ivf else []
        sweep_rows = [
            [
                p,
                *(
                    [f"{ivf['sweep'][p]['recall']:.3f}", f"{ivf['sweep'][p]['qps']:,.0f}"]
                    if ivf
                    else []
                ),
                f"{ours['sweep'][p]['recall']:.3f}",
                f"{ours['sweep'][p]['qps']:,.0f}",
            ]
            for p in ours["sweep"]
        ]
        lines.append(f"nprobe sweep ({row['data']}):\n")
        lines.append(
            markdown_table(
                ["nprobe", *faiss_columns, f"ours recall@{k}", "ours queries/s"], sweep_rows
            )
            + "\n"
        )
        if "lifecycle" in row:
            lines.append(
                f"Lifecycle ({row['data']}): each backend loaded from its save, then 1% of the "
                "ids removed, another 1% upserted with new embeddings, `compact()`, `save`; a "
                "lookup afterwards counts removed ids returned (must be 0). FaissOnDiskSearch is "
                "loaded as its own working folder (`directory=` the saved folder), so it "
                "changes its files in place.\n"
            )
            names = {
                "ours": "FaissOnDiskSearch",
                "linear": "LinearSearch",
                "milvus": "MilvusSearch (Milvus Lite)",
            }
            lines.append(
                markdown_table(
                    [
                        "backend",
                        "removed",
                        "remove s",
                        "upserted",
                        "upsert s",
                        "compact s",
                        "save s",
                        "peak MiB",
                        "removed ids returned",
                    ],
                    [
                        [
                            names[b],
                            f"{r['removed']:,}",
                            f"{r['remove_s']:.2f}",
                            f"{r['upserted']:,}",
                            f"{r['upsert_s']:.2f}",
                            f"{r['compact_s']:.2f}",
                            f"{r['save_s']:.2f}",
                            f"{r['peak_mb']:,.0f}",
                            r["removed_ids_returned"],
                        ]
                        for b, r in row["lifecycle"].items()
                    ],
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
    parser.add_argument(
        "--skip-faiss-ivf", action="store_true", help="leave faiss' own IVF on disk out"
    )
    parser.add_argument("--skip-milvus", action="store_true", help="leave Milvus Lite out")
    parser.add_argument(
        "--skip-indexer", action="store_true", help="leave the default Indexer's save/load out"
    )
    parser.add_argument(
        "--skip-lifecycle", action="store_true", help="leave the remove/upsert/compact times out"
    )
    parser.add_argument("--milvus-index", default="IVF_FLAT", help="Milvus index type")
    parser.add_argument("--milvus-batch", type=int, default=2048, help="rows per Milvus request")
    parser.add_argument(
        "--milvus-queries",
        type=int,
        default=100,
        help="queries sent to Milvus Lite and after the lifecycle (the first of --queries)",
    )
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per phase")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    parser.add_argument("--name", default=NAME, help="of the results files (NAME.json, NAME.md)")
    parser.add_argument(
        "--rerender",
        action="store_true",
        help="only render NAME.json in --out again (its verdicts and NAME.md), measuring nothing",
    )
    parser.add_argument("--phase", choices=sorted(PHASES), help=argparse.SUPPRESS)
    parser.add_argument("--phase-args", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        arguments = json.loads(args.phase_args)
        result = PHASES[args.phase](arguments)
        (Path(arguments["work"]) / f"{args.phase}.json").write_text(json.dumps(result))
        return
    if args.rerender:
        out = args.out or RESULTS_DIR
        payload = json.loads((out / f"{args.name}.json").read_text())
        payload["verdicts"] = verdicts(payload)
        print(write_results_files(out, args.name, payload, render_markdown))
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
    print(write_results_files(out, args.name, payload, render_markdown))


if __name__ == "__main__":
    main()
