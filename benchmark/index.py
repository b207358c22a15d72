"""Benchmark of the search backends: build time, batch_lookup queries per second, recall@k.

On `--queries` random queries against 10^4 and 10^5 random `--dim`-d
embeddings (Gaussian, cosine distance), for each size:

1. `LinearSearch` against a plain TensorFlow matrix product + `tf.math.top_k`
   on the same unit rows. Target: `LinearSearch` within 1.2x of it.
2. `FaissSearch(algo="flat")` against a faiss `IndexFlatIP` called directly.
   Target: within 1.2x of it.
3. `FaissSearch(algo="hnsw")`: build time, and queries per second and
   recall@k against the exact neighbours at several `ef_search` values,
   the default among them. Target: recall@10 >= 0.95 at the default, and
   more queries per second than `FaissSearch(algo="flat")`.
   Gaussian embeddings have no structure at all, the worst case of a
   graph index; trained embeddings are clustered by class. So hnsw is
   also measured on clustered embeddings (`--clusters` random Gaussian
   centres, each embedding a centre plus Gaussian noise of a third of the
   centres' scale), queries drawn alike. The target is reported on both.

Build time is one `batch_add` of every embedding (for the references: the
normalised tensor, or `IndexFlatIP.add`). Query times are medians of
`--repeats` `batch_lookup` calls of all the queries at once after one
warm-up call, each pair timed in alternation (which goes first swaps every
repeat) so that load from other processes hits both alike. Results go to
`<out>/index.json` and `<out>/index.md`.

Usage (from the repository root):

    python -m benchmark.index            # full run, about 25 minutes on 2 busy cores
    python -m benchmark.index --quick    # smoke run (1,000 embeddings), into a temporary folder
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import faiss  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmark.common import markdown_table, paired_medians, seconds  # noqa: E402
from tensorflow_similarity.search import FaissSearch, LinearSearch  # noqa: E402

TARGET_RATIO = 1.2
TARGET_RECALL = 0.95
EF_SEARCH_SWEEP = (64, 128, 256, 512)


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Mean over queries of the fraction of the exact `k` neighbours found."""
    k = exact.shape[1]
    return float(np.mean([len(set(f) & set(e)) / k for f, e in zip(found, exact, strict=True)]))


def clustered(rng: np.random.Generator, centres: np.ndarray, count: int) -> np.ndarray:
    """`count` embeddings, each a random centre plus noise a third of the centres' scale."""
    picks = rng.integers(0, len(centres), count)
    noise = rng.normal(scale=1 / 3, size=(count, centres.shape[1]))
    return (centres[picks] + noise).astype(np.float32)


def measure_hnsw(
    embeddings: np.ndarray, queries: np.ndarray, exact: np.ndarray, k: int, repeats: int
) -> dict:
    """hnsw's build time, and its queries per second and recall at each ef_search."""
    dim, num_queries = embeddings.shape[1], len(queries)
    hnsw = FaissSearch("cosine", dim=dim, algo="hnsw")
    default_ef = hnsw.ef_search
    row = {"build_s": seconds(lambda: hnsw.batch_add(embeddings, np.arange(len(embeddings))))}
    row["default_ef_search"] = default_ef
    sweep = []
    for ef_search in sorted({*EF_SEARCH_SWEEP, default_ef}):
        hnsw.ef_search = ef_search
        hnsw.batch_lookup(queries, k)
        query_s = statistics.median(
            seconds(lambda: hnsw.batch_lookup(queries, k)) for _ in range(repeats)
        )
        sweep.append(
            {
                "ef_search": ef_search,
                "query_s": query_s,
                "qps": num_queries / query_s,
                "recall": recall_at_k(hnsw.batch_lookup(queries, k)[0], exact),
            }
        )
    row["sweep"] = sweep
    default = next(entry for entry in sweep if entry["ef_search"] == default_ef)
    row.update(qps=default["qps"], recall=default["recall"])
    return row


def measure(
    size: int, dim: int, num_queries: int, k: int, repeats: int, seed: int, clusters: int
) -> dict:
    rng = np.random.default_rng(seed)
    embeddings = rng.normal(size=(size, dim)).astype(np.float32)
    queries = rng.normal(size=(num_queries, dim)).astype(np.float32)
    ids = np.arange(size)
    unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
    unit_queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    row: dict = {"size": size, "dim": dim, "queries": num_queries, "k": k}

    # LinearSearch against a plain matrix product + top-k.
    linear = LinearSearch("cosine", dim=dim)
    row["linear_build_s"] = seconds(lambda: linear.batch_add(embeddings, ids))
    keys = {}
    row["tf_build_s"] = seconds(lambda: keys.setdefault("t", tf.constant(unit)))

    def plain_tf():
        similarities = tf.matmul(tf.constant(unit_queries), keys["t"], transpose_b=True)
        return tf.math.top_k(similarities, k)[1].numpy()

    linear_s, tf_s = paired_medians(lambda: linear.batch_lookup(queries, k), plain_tf, repeats)
    exact = linear.batch_lookup(queries, k)[0]
    row.update(
        linear_query_s=linear_s,
        tf_query_s=tf_s,
        linear_qps=num_queries / linear_s,
        tf_qps=num_queries / tf_s,
        linear_over_tf=linear_s / tf_s,
        linear_recall_vs_tf=recall_at_k(exact, plain_tf()),
    )

    # FaissSearch(flat) against faiss called directly.
    flat = FaissSearch("cosine", dim=dim, algo="flat")
    row["faiss_flat_build_s"] = seconds(lambda: flat.batch_add(embeddings, ids))
    direct = faiss.IndexFlatIP(dim)
    row["faiss_direct_build_s"] = seconds(lambda: direct.add(unit))
    flat_s, direct_s = paired_medians(
        lambda: flat.batch_lookup(queries, k), lambda: direct.search(unit_queries, k), repeats
    )
    row.update(
        faiss_flat_query_s=flat_s,
        faiss_direct_query_s=direct_s,
        faiss_flat_qps=num_queries / flat_s,
        faiss_direct_qps=num_queries / direct_s,
        faiss_flat_over_direct=flat_s / direct_s,
        faiss_flat_recall=recall_at_k(flat.batch_lookup(queries, k)[0], exact),
    )

    # hnsw on the Gaussian embeddings, then on clustered ones.
    gaussian = measure_hnsw(embeddings, queries, exact, k, repeats)
    centres = rng.normal(size=(clusters, dim))
    grouped, grouped_queries = clustered(rng, centres, size), clustered(rng, centres, num_queries)
    grouped_exact = LinearSearch("cosine", dim=dim)
    grouped_exact.batch_add(grouped, ids)
    grouped_hnsw = measure_hnsw(
        grouped, grouped_queries, grouped_exact.batch_lookup(grouped_queries, k)[0], k, repeats
    )
    row.update(
        hnsw_build_s=gaussian["build_s"],
        hnsw_default_ef_search=gaussian["default_ef_search"],
        hnsw_sweep=gaussian["sweep"],
        hnsw_qps=gaussian["qps"],
        hnsw_recall=gaussian["recall"],
        clusters=clusters,
        hnsw_clustered_build_s=grouped_hnsw["build_s"],
        hnsw_clustered_sweep=grouped_hnsw["sweep"],
        hnsw_clustered_qps=grouped_hnsw["qps"],
        hnsw_clustered_recall=grouped_hnsw["recall"],
    )
    return row


def verdicts(rows: list[dict]) -> list[str]:
    """One line per target: the figures and whether every size meets it."""

    def line(name: str, values: list[float], met: bool, unit: str) -> str:
        figures = ", ".join(
            f"{row['size']:,}: {value:{unit}}" for row, value in zip(rows, values, strict=True)
        )
        return f"- {name}: {figures} -> {'met' if met else 'NOT met'}"

    linear = [row["linear_over_tf"] for row in rows]
    flat = [row["faiss_flat_over_direct"] for row in rows]
    recall = [row["hnsw_recall"] for row in rows]
    clustered_recall = [row["hnsw_clustered_recall"] for row in rows]
    # FaissSearch(flat)'s cost does not depend on the data, so one measurement serves both.
    speedup = [row["hnsw_qps"] / row["faiss_flat_qps"] for row in rows]
    clustered_speedup = [row["hnsw_clustered_qps"] / row["faiss_flat_qps"] for row in rows]
    speedups = ", ".join(
        f"{row['size']:,}: {gaussian:.2f} (clustered {grouped:.2f})"
        for row, gaussian, grouped in zip(rows, speedup, clustered_speedup, strict=True)
    )
    return [
        line(
            f"LinearSearch / plain TF matmul + top-k <= {TARGET_RATIO}",
            linear,
            max(linear) <= TARGET_RATIO,
            ".2f",
        ),
        line(
            f"FaissSearch(flat) / faiss direct <= {TARGET_RATIO}",
            flat,
            max(flat) <= TARGET_RATIO,
            ".2f",
        ),
        line(
            f"hnsw recall@{rows[0]['k']} >= {TARGET_RECALL}, Gaussian embeddings",
            recall,
            min(recall) >= TARGET_RECALL,
            ".3f",
        ),
        line(
            f"hnsw recall@{rows[0]['k']} >= {TARGET_RECALL}, clustered embeddings",
            clustered_recall,
            min(clustered_recall) >= TARGET_RECALL,
            ".3f",
        ),
        f"- hnsw queries/s / FaissSearch(flat) queries/s > 1, Gaussian embeddings (clustered): "
        f"{speedups} -> {'met' if min(speedup + clustered_speedup) > 1 else 'NOT met'}",
    ]


def render_markdown(payload: dict) -> str:
    rows = payload["rows"]
    k = payload["k"]
    lines = [
        "# Search backends",
        "",
        f"{payload['date']}, {payload['machine']}, load average {payload['load_average']:.2f}, "
        f"TensorFlow {payload['tensorflow']}, faiss {payload['faiss']}. "
        f"{payload['queries']:,} random queries, k={k}, {payload['dim']}-d Gaussian embeddings, "
        f"cosine distance (clustered: {rows[0]['clusters']:,} clusters); query times are "
        f"medians of {payload['repeats']} batch_lookup calls "
        "of all the queries, each pair timed alternating which goes first.",
        "",
        "## Targets",
        "",
        *verdicts(rows),
        "",
        "## Build (s) and queries per second",
        "",
        markdown_table(
            [
                "embeddings",
                "backend",
                "build (s)",
                "queries/s",
                f"recall@{k} vs exact",
                "ratio to reference",
            ],
            [
                line
                for row in rows
                for line in (
                    [
                        f"{row['size']:,}",
                        "LinearSearch",
                        f"{row['linear_build_s']:.3f}",
                        f"{row['linear_qps']:,.0f}",
                        "1 (exact)",
                        f"{row['linear_over_tf']:.2f}",
                    ],
                    [
                        f"{row['size']:,}",
                        "plain TF matmul + top-k",
                        f"{row['tf_build_s']:.3f}",
                        f"{row['tf_qps']:,.0f}",
                        f"{row['linear_recall_vs_tf']:.3f}",
                        "reference",
                    ],
                    [
                        f"{row['size']:,}",
                        "FaissSearch(flat)",
                        f"{row['faiss_flat_build_s']:.3f}",
                        f"{row['faiss_flat_qps']:,.0f}",
                        f"{row['faiss_flat_recall']:.3f}",
                        f"{row['faiss_flat_over_direct']:.2f}",
                    ],
                    [
                        f"{row['size']:,}",
                        "faiss IndexFlatIP direct",
                        f"{row['faiss_direct_build_s']:.3f}",
                        f"{row['faiss_direct_qps']:,.0f}",
                        "",
                        "reference",
                    ],
                    [
                        f"{row['size']:,}",
                        f"FaissSearch(hnsw, ef_search={row['hnsw_default_ef_search']})",
                        f"{row['hnsw_build_s']:.2f}",
                        f"{row['hnsw_qps']:,.0f}",
                        f"{row['hnsw_recall']:.3f}",
                        "",
                    ],
                    [
                        f"{row['size']:,} clustered",
                        f"FaissSearch(hnsw, ef_search={row['hnsw_default_ef_search']})",
                        f"{row['hnsw_clustered_build_s']:.2f}",
                        f"{row['hnsw_clustered_qps']:,.0f}",
                        f"{row['hnsw_clustered_recall']:.3f}",
                        "",
                    ],
                )
            ],
        ),
        "",
        "## hnsw: recall against speed",
        "",
        markdown_table(
            ["embeddings", "ef_search", "queries/s", f"recall@{k}"],
            [
                [
                    f"{row['size']:,}{suffix}",
                    entry["ef_search"],
                    f"{entry['qps']:,.0f}",
                    f"{entry['recall']:.3f}",
                ]
                for row in rows
                for suffix, key in (("", "hnsw_sweep"), (" clustered", "hnsw_clustered_sweep"))
                for entry in row[key]
            ],
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run, into a temporary folder")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5, help="timed lookups (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clusters", type=int, default=1_000, help="of the clustered set")
    parser.add_argument("--out", type=Path, default=None, help="defaults to benchmark/results")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.queries, args.repeats, args.clusters = [1_000], 50, 1, 50
    if args.out is None:
        quick_out = Path(tempfile.mkdtemp(prefix="index_benchmark_"))
        args.out = quick_out if args.quick else Path(__file__).parent / "results"

    payload = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "load_average": os.getloadavg()[0],
        "tensorflow": tf.__version__,
        "faiss": faiss.__version__,
        "dim": args.dim,
        "queries": args.queries,
        "k": args.k,
        "repeats": args.repeats,
        "quick": args.quick,
        "rows": [],
    }
    for size in args.sizes:
        payload["rows"].append(
            measure(size, args.dim, args.queries, args.k, args.repeats, args.seed, args.clusters)
        )
        print(json.dumps(payload["rows"][-1]), flush=True)
    payload["verdicts"] = verdicts(payload["rows"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "index.json").write_text(json.dumps(payload, indent=2) + "\n")
    (args.out / "index.md").write_text(render_markdown(payload))
    print("\n".join(payload["verdicts"]))
    print(f"wrote {args.out / 'index.json'} and {args.out / 'index.md'}")


if __name__ == "__main__":
    main()
