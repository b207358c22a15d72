"""Assembles `benchmark/results/REPORT.md` from the sections each benchmark renders.

Every section comes from one results file in `--results` (default
`benchmark/results`) and is rendered by the benchmark that wrote it; `SECTIONS`
below lists them in the report's order, and a section whose file is absent is
left out:

* `ssl_quality.json`, `ssl_small_batch.json`: `benchmark/self_supervised/report.py`
  (kNN accuracy with per-replica batch norm, synchronised batch norm and one
  device; the plots `ssl_quality.png`, `ssl_small_batch.png` and
  `ssl_small_batch_paired.png`);
* `metric_small_batch.json`: `benchmark/metric/small_batch_tables.py` (a metric
  loss at 2 and 4 images per replica; `metric_small_batch.png`);
* `sync_bn.json`, `sync_bn_gpu.json`: `benchmark/sync_bn/report.py` (collectives,
  step-time overhead, robustness; `sync_bn_overhead.png`, `sync_bn_bytes.png` and
  their `_gpu` twins);
* the results in `SCRIPT_SECTIONS` (the glyphs runs, architecture builders,
  search backends, metric losses, the metric losses under one protocol, one
  replica's rows of a global-batch loss, the serving export's index size):
  their benchmark's own `render_markdown`, under a heading and the command that
  produced them;
* `unseen_digits.json`: `benchmark/glyphs/report.py`.

Here: the title, the table of machines, and `REPORT.md` written with the plots
next to it. Every number in the report, the conclusions included, is computed
from those files; none is typed by hand. The machine, date and command of each
result come from the JSON.

Usage (from the repository root):

    python -m benchmark.self_supervised.quality && python -m benchmark.sync_bn && \\
        python -m benchmark.architectures && python -m benchmark.report
    python -m benchmark.report --results /tmp/out     # report on results elsewhere,
                                                      # e.g. the folder a --quick run printed
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmark.common import (
    REPO_ROOT,
    REPORT_COMMAND,
    RESULTS_DIR,
    command_line,
    markdown_table,
    render_tables,
)
from benchmark.glyphs import report as glyphs_report
from benchmark.metric import small_batch_tables
from benchmark.self_supervised import report as self_supervised_report
from benchmark.sync_bn import report as sync_bn_report


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Write REPORT.md and PNG plots from the benchmarks' JSON results."
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS_DIR,
        help="Folder holding the JSON results (default: benchmark/results).",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="Folder for REPORT.md and the plots (default: the --results folder).",
    )
    return parser.parse_args(argv)


def load_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    return json.loads(path.read_text())


# Results rendered by their own benchmark's `render_markdown`: file -> (module, section title).
SCRIPT_SECTIONS = {
    "glyphs_runs.json": ("benchmark.glyphs.runs", "Both jobs' default runs on glyphs"),
    "glyphs_ssl_length.json": (
        "benchmark.glyphs.ssl_length",
        "The self-supervised job on glyphs by width and length of run",
    ),
    "glyphs_teachers.json": (
        "benchmark.glyphs.teachers",
        "Momentum teachers beside SimCLR on glyphs",
    ),
    "leakage.json": (
        "benchmark.self_supervised.leakage",
        "The batch-norm leak, measured: per-replica, synchronised and shuffle batch norm",
    ),
    "large_batch.json": ("benchmark.glyphs.large_batch", "Large global batch: LARS against Adam"),
    "architectures.json": ("benchmark.architectures", "Architecture builders"),
    "cached_batches.json": (
        "benchmark.cached_batches",
        "Cached-embedding batches: peak memory against the chunk size",
    ),
    "index.json": ("benchmark.index", "Search backends"),
    "index_scale.json": (
        "benchmark.index_scale",
        "The index at a million embeddings: exact, on disk, Milvus Lite, lifecycle",
    ),
    "index_scale_10m.json": (
        "benchmark.index_scale",
        "The index at ten million embeddings: on disk in bounded memory",
    ),
    "linear_vs_flat.json": (
        "benchmark.linear_vs_flat",
        "Exact search: LinearSearch against faiss IndexFlatIP",
    ),
    "index_evaluation.json": ("benchmark.index_evaluation", "Index evaluation path"),
    "index_evaluation_memory.json": (
        "benchmark.index_evaluation_memory",
        "Index evaluation: peak memory against the number of queries",
    ),
    "metric_losses.json": (
        "benchmark.metric.losses",
        "Metric losses: global vs per-replica mining",
    ),
    "metric_protocol.json": (
        "benchmark.metric.protocol",
        "Metric losses under one protocol: MAP@R, NMI and AMI on unseen classes",
    ),
    "replica_rows.json": (
        "benchmark.replica_rows",
        "Global-batch losses: one replica's rows against the number of replicas",
    ),
    "serving_size.json": ("benchmark.serving_size", "Serving: the index in the exported model"),
    "serving_size_constants.json": (
        "benchmark.serving_size",
        "Serving: the index as graph constants, for comparison",
    ),
    "serving_external.json": ("benchmark.serving_external", "Serving: an index beyond the limit"),
    "views.json": ("benchmark.views", "Two-view augmenters: images per second"),
    "views_peer.json": ("benchmark.views_peer", "SimCLR two views: ours against lightly"),
    "sync_bn_reference_range.json": (
        "benchmark.sync_bn.reference_range",
        'Sync batch norm: the "reduce" exchange step by step, far from the moving mean',
    ),
}


def script_section(report: dict[str, Any], out: Path, results_name: str) -> str:
    """The section of a results file whose benchmark renders its own tables (no plot in `out`).

    The benchmark is imported only when its results are present (`render_tables`), so
    the report does not need every benchmark's dependencies.
    """
    module, title = SCRIPT_SECTIONS[results_name]
    # The command the results record, if they do (with its options), else the module's own.
    command = report.get("command") or command_line(
        module, ["--quick"] if report.get("quick") else []
    )
    return "\n".join(
        [
            f"## {title} (`{results_name}`)\n",
            f"Command: `{command}`.\n",
            render_tables(module, report, results_name, command).rstrip("\n") + "\n",
        ]
    )


# How a section is rendered: (its results, the folder for its plots, the results' file name)
# -> its markdown, from `## title` on.
SectionRenderer = Callable[[dict[str, Any], Path, str], str]

# Every section of REPORT.md, in order: results file -> the renderer of its benchmark.
SECTIONS: dict[str, SectionRenderer] = {
    "ssl_quality.json": self_supervised_report.quality_section,
    "ssl_small_batch.json": self_supervised_report.small_batch_section,
    "metric_small_batch.json": small_batch_tables.report_section,
    "sync_bn.json": sync_bn_report.report_section,
    "sync_bn_gpu.json": sync_bn_report.report_section,
    **dict.fromkeys(SCRIPT_SECTIONS, script_section),
    "unseen_digits.json": glyphs_report.digits_section,
}


def machines_table(sources: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, report in sources.items():
        meta = report.get("meta", report)
        rows.append(
            [
                f"`{name}`",
                meta.get("date_utc") or meta.get("date", "?"),
                meta.get("hardware") or meta.get("machine", "?"),
                meta.get("platform", "-"),
                f"TF {meta.get('tensorflow', '?')}, Keras {meta.get('keras', '?')}",
            ]
        )
    return markdown_table(["results", "date", "machine", "platform", "versions"], rows)


def display_path(path: Path) -> str:
    """`path` relative to the repository root when it is inside it."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def build_report(results: Path, out: Path) -> str:
    """Writes the plots into `out` and returns the markdown of REPORT.md."""
    sources = {name: data for name in SECTIONS if (data := load_json(results / name)) is not None}
    generated = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    parts = [
        "# Benchmark report\n",
        f"Assembled by `{REPORT_COMMAND}` from the JSON results in "
        f"`{display_path(results)}/`, {generated} (UTC). Every number and figure below is "
        "computed from those files; each section names the command that produced its data.\n",
    ]
    if not sources:
        parts.append("No results found: run the benchmark scripts first.\n")
        return "\n".join(parts)
    parts += ["## Machines\n", machines_table(sources) + "\n"]
    parts += [
        render(sources[name], out, name) for name, render in SECTIONS.items() if name in sources
    ]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> Path:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    out = args.out or args.results
    out.mkdir(parents=True, exist_ok=True)
    markdown = build_report(args.results, out)
    path = out / "REPORT.md"
    path.write_text(markdown)
    print(f"Wrote {path}")
    return path


if __name__ == "__main__":
    main()
