"""The self-supervised sections of `REPORT.md`: kNN accuracy plots, tables, conclusions.

Part of `python -m benchmark.report`, which imports it; every number comes from
`ssl_quality.json` (`python -m benchmark.self_supervised.quality`, 8 and 32 images per
replica) or `ssl_small_batch.json` (`python -m benchmark.self_supervised.small_batch`,
2 and 4), each rendered by `quality_section` or `small_batch_section`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmark.common import REPORT_COMMAND, command_line  # noqa: E402
from benchmark.self_supervised import quality_tables  # noqa: E402
from benchmark.self_supervised.conclusion import algorithm_label, ssl_conclusion  # noqa: E402
from benchmark.self_supervised.quality_tables import SETTINGS  # noqa: E402

SETTING_STYLE = {
    "per_replica": ("(a) per-replica BN, 4 replicas", "tab:red", "o"),
    "sync": ("(b) synchronised BN, 4 replicas", "tab:blue", "s"),
    "single": ("(c) one device, global batch", "tab:gray", "^"),
}


def plot_ssl_quality(report: dict[str, Any], path: Path) -> None:
    """kNN accuracy vs per-replica batch, one panel per algorithm, error bars = seed std."""
    config = report["meta"]["config"]
    algorithms = config["algorithms"]
    batches = config["batch_sizes"]
    summary = {(r["algorithm"], r["batch_per_replica"], r["setting"]): r for r in report["summary"]}
    figure, axes = plt.subplots(
        1, len(algorithms), figsize=(4.2 * len(algorithms), 3.6), sharey=True, squeeze=False
    )
    for axis, algorithm in zip(axes[0], algorithms, strict=True):
        for offset, setting in zip((-0.06, 0.0, 0.06), SETTINGS, strict=True):
            label, color, marker = SETTING_STYLE[setting]
            rows = [summary.get((algorithm, b, setting)) for b in batches]
            xs = [b * 2**offset for b, r in zip(batches, rows, strict=True) if r]
            axis.errorbar(
                xs,
                [100 * r["mean"] for r in rows if r],
                yerr=[100 * r["std"] for r in rows if r],
                label=label,
                color=color,
                marker=marker,
                capsize=4,
                linewidth=1.5,
            )
        axis.set_xscale("log", base=2)
        axis.set_xlim(min(batches) / 1.6, max(batches) * 1.6)
        axis.set_xticks(batches, [str(b) for b in batches])
        axis.minorticks_off()
        axis.set_xlabel("images per replica (global batch = 4x)")
        axis.set_title(algorithm_label(algorithm))
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("kNN top-1 accuracy (%)")
    axes[0][-1].legend(fontsize=8, loc="best")
    n = max(r["n"] for r in report["summary"])
    figure.suptitle(f"Test kNN accuracy, mean ± std over {n} seed(s)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


SSL_INTRO = (
    "SimSiam, SimCLR and Barlow Twins trained self-supervised under (a) 4 replicas "
    "with per-replica batch norm, (b) 4 replicas with synchronised batch norm and (c) "
    "one device with the global batch; test kNN accuracy of the backbone's "
    "embeddings. Earlier runs of these sections on scikit-learn's 8x8 digits, where raw "
    "pixels leave no room to learn (see the digits paragraph further down), are in the "
    "project's history.\n"
)
SMALL_BATCH_INTRO = (
    "The regime where synchronised batch norm is used in practice (1-4 images per device, "
    "as in detection and high-resolution training): SimSiam and SimCLR with 2 and 4 images "
    "per replica (global batches of 8 and 16 over 4 replicas), under the same three "
    "settings. A supervised metric loss in the same regime (global vs per-replica mining "
    "and batch norm) is in the section from `metric_small_batch.json`.\n"
)


def plot_paired_differences(report: dict[str, Any], path: Path) -> None:
    """Per-seed paired differences to (c), mean ± std, one panel per algorithm."""
    config = report["meta"]["config"]
    algorithms = config["algorithms"]
    batches = config["batch_sizes"]
    summary = {(r["algorithm"], r["batch_per_replica"], r["setting"]): r for r in report["summary"]}
    figure, axes = plt.subplots(
        1, len(algorithms), figsize=(4.2 * len(algorithms), 3.6), sharey=True, squeeze=False
    )
    for axis, algorithm in zip(axes[0], algorithms, strict=True):
        for offset, setting in zip((-0.04, 0.04), ("per_replica", "sync"), strict=True):
            label, color, marker = SETTING_STYLE[setting]
            rows = [summary.get((algorithm, b, setting)) for b in batches]
            kept = [
                (b, r)
                for b, r in zip(batches, rows, strict=True)
                if r and "diff_vs_single_mean" in r
            ]
            axis.errorbar(
                [b * 2**offset for b, _ in kept],
                [100 * r["diff_vs_single_mean"] for _, r in kept],
                yerr=[100 * r["diff_vs_single_std"] for _, r in kept],
                label=f"{label} - (c)",
                color=color,
                marker=marker,
                capsize=4,
                linewidth=1.5,
            )
        axis.axhline(0.0, color="black", linewidth=0.8, linestyle="--")
        axis.set_xscale("log", base=2)
        axis.set_xlim(min(batches) / 1.6, max(batches) * 1.6)
        axis.set_xticks(batches, [str(b) for b in batches])
        axis.minorticks_off()
        axis.set_xlabel("images per replica (global batch = 4x)")
        axis.set_title(algorithm_label(algorithm))
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("kNN accuracy minus one device's (points)")
    axes[0][-1].legend(fontsize=8, loc="best")
    n = max(r["n"] for r in report["summary"])
    figure.suptitle(f"Paired differences to one device, mean ± std over {n} seed(s)", fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# Before commit c910ea3 (on main from this time on), the self-supervised quality benchmark's
# Trainer zeroed every optimizer variable before each run, Adam's learning rate included: no
# run trained.
TRAINER_FIXED_UTC = "2026-12-01T12:39:06+00:00"
INVALID_SSL_RESULTS = (
    "**These results are invalid.** They were measured before a fix to "
    "the self-supervised quality benchmark (commit c910ea3): its trainer reset every optimizer "
    "variable to zero before each run, Adam's learning rate included, so no run trained; only "
    "the batch-norm moving statistics changed. Rerun `{command}`, then `{report}`.\n\n"
)
# The benchmark that writes each self-supervised results file.
SSL_MODULES = {
    "ssl_quality.json": "benchmark.self_supervised.quality",
    "ssl_small_batch.json": "benchmark.self_supervised.small_batch",
}


def ssl_section(
    report: dict[str, Any],
    plot: Path,
    results_name: str,
    title: str = "Representation quality: per-replica vs synchronised batch norm",
    intro: str = SSL_INTRO,
    paired_plot: Path | None = None,
) -> str:
    meta = report["meta"]
    figure_source = (
        f"Figure: `{meta['command']}`, then `{REPORT_COMMAND}` (from `{results_name}`).\n"
    )
    if meta["date_utc"] < TRAINER_FIXED_UTC:
        command = command_line(SSL_MODULES[results_name])
        intro = INVALID_SSL_RESULTS.format(command=command, report=REPORT_COMMAND) + intro
    paired = (
        []
        if paired_plot is None
        else [f"![Paired differences to one device]({paired_plot.name})\n", figure_source]
    )
    return "\n".join(
        [
            f"## {title}\n",
            intro,
            quality_tables.setup_markdown(report),
            f"![kNN accuracy vs per-replica batch]({plot.name})\n",
            figure_source,
            *paired,
            quality_tables.tables_markdown(report, level=3),
            "### Conclusion\n",
            ssl_conclusion(report),
        ]
    )


def quality_section(report: dict[str, Any], out: Path, results_name: str) -> str:
    """`REPORT.md`'s section of `ssl_quality.json`; its plot is written into `out`."""
    plot = out / "ssl_quality.png"
    plot_ssl_quality(report, plot)
    return ssl_section(report, plot, results_name)


def small_batch_section(report: dict[str, Any], out: Path, results_name: str) -> str:
    """`REPORT.md`'s section of `ssl_small_batch.json`; its two plots are written into `out`."""
    plot = out / "ssl_small_batch.png"
    paired_plot = out / "ssl_small_batch_paired.png"
    plot_ssl_quality(report, plot)
    plot_paired_differences(report, paired_plot)
    return ssl_section(
        report,
        plot,
        results_name,
        title="Where sync batch norm should matter: 2 and 4 images per replica",
        intro=SMALL_BATCH_INTRO,
        paired_plot=paired_plot,
    )
