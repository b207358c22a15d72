"""The sync batch-norm sections of `REPORT.md`: overhead and bytes plots, conclusions.

Part of `python -m benchmark.report`, which imports it (`report_section`); every number
comes from `sync_bn.json` (or `sync_bn_gpu.json`), written by `python -m benchmark.sync_bn`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmark.common import REPORT_COMMAND, render_tables  # noqa: E402

VARIANT_STYLE = {
    "keras": ("Keras BatchNormalization(synchronized=True)", "tab:orange", "o"),
    "ours": ("ours SyncBatchNormalization", "tab:blue", "s"),
    "ours_gather": ('ours, exchange="gather"', "tab:purple", "D"),
    "ours_g2": ("ours, GroupSyncBatchNorm(2)", "tab:green", "^"),
}


# --------------------------------------------------------------------------------------
# Sync batch-norm overhead.
# --------------------------------------------------------------------------------------


def overhead_series(report: dict[str, Any]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Step-time ratio to plain batch norm: panel -> variant -> [(replicas, ratio)].

    Panels are the small-model settings of `step_time` and the models of
    `resnet_step_time` (when that section exists).
    """
    panels: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for row in report.get("step_time") or []:
        panel = panels.setdefault(f"{row['setting']} (small ResNet)", {})
        for variant in ("keras", "ours", "ours_gather"):
            key = "gather_over_plain" if variant == "ours_gather" else f"{variant}_over_plain"
            if row.get(key) is not None:
                panel.setdefault(variant, []).append((row["replicas"], row[key]))
    for row in report.get("resnet_step_time") or []:
        panel = panels.setdefault(str(row.get("model", "ResNet")), {})
        for variant, ratio in (row.get("over_plain") or {}).items():
            if variant != "plain" and ratio is not None:
                panel.setdefault(variant, []).append((row["replicas"], ratio))
    return {name: panel for name, panel in panels.items() if panel}


def plot_overhead(report: dict[str, Any], path: Path) -> bool:
    """Step time / plain step time vs replicas; returns False when there is nothing to plot."""
    panels = overhead_series(report)
    if not panels:
        return False
    figure, axes = plt.subplots(
        1, len(panels), figsize=(4.0 * len(panels), 3.6), squeeze=False, sharey=False
    )
    for axis, (name, panel) in zip(axes[0], panels.items(), strict=True):
        replica_counts = sorted({r for series in panel.values() for r, _ in series})
        for variant, series in panel.items():
            label, color, marker = VARIANT_STYLE.get(variant, (variant, None, "x"))
            series = sorted(series)
            axis.plot(
                [r for r, _ in series],
                [ratio for _, ratio in series],
                label=label,
                color=color,
                marker=marker,
            )
        axis.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        axis.set_xscale("log", base=2)
        axis.set_xticks(replica_counts, [str(r) for r in replica_counts])
        axis.minorticks_off()
        axis.set_xlabel("replicas")
        axis.set_title(name, fontsize=10)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("step time / plain BN step time")
    # Panels may show different variants (a group of 2 needs 4 replicas): one legend for all.
    legend = {}
    for axis in axes[0]:
        for handle, label in zip(*axis.get_legend_handles_labels(), strict=True):
            legend.setdefault(label, handle)
    figure.legend(legend.values(), legend.keys(), loc="lower center", ncol=len(legend), fontsize=8)
    figure.suptitle(f"Sync batch-norm overhead ({report['meta']['hardware']})", fontsize=10)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def overhead_conclusion(report: dict[str, Any]) -> str:
    """At the largest replica count of each panel, ours' overhead next to Keras'."""
    sentences = []
    for name, panel in overhead_series(report).items():
        if "ours" not in panel:
            continue
        replicas, ours = max(panel["ours"])
        text = f"{name}, {replicas} replicas: ours {100 * (ours - 1):+.0f}% step time"
        keras_ratio = dict(panel.get("keras", [])).get(replicas)
        if keras_ratio is not None:
            text += f", Keras' synchronised batch norm {100 * (keras_ratio - 1):+.0f}%"
        sentences.append(text)
    if not sentences:
        return ""
    return (
        "Overhead over plain batch norm at the largest replica count measured: "
        + "; ".join(sentences)
        + ". The replicas share one host, so these are synchronisation costs, not speed-ups.\n"
    )


def plot_batch_norm_bytes(report: dict[str, Any], path: Path) -> bool:
    """Batch-norm bytes per step vs replicas (the floor's scaling model), next to the gradients.

    Returns:
        False when the report has no scaling model (nothing is drawn).
    """
    scaling = (report.get("floor") or {}).get("scaling")
    if not scaling:
        return False
    rows = scaling["rows"]
    replicas = [r["replicas"] for r in rows]
    figure, axis = plt.subplots(figsize=(6.0, 3.8))
    for variant in ("keras", "ours", "ours_gather"):
        label, color, marker = VARIANT_STYLE[variant]
        axis.plot(
            replicas,
            [r["batch_norm"][variant]["bytes"] / 1e6 for r in rows],
            label=label,
            color=color,
            marker=marker,
        )
    axis.plot(
        replicas,
        [r["gradient_bytes"] / 1e6 for r in rows],
        label="gradient all-reduce (float32)",
        color="black",
        linestyle="--",
    )
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xticks(replicas, [str(r) for r in replicas])
    axis.minorticks_off()
    axis.set_xlabel("replicas")
    axis.set_ylabel("MB per replica per step")
    axis.set_title(
        f"Batch-norm bytes per step, {scaling['model']}\n"
        f"{scaling['batch_norm_channels']:,} BN channels, "
        f"{scaling['trainable_parameters'] / 1e6:.1f} M parameters",
        fontsize=9,
    )
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return True


def sync_bn_section(
    report: dict[str, Any],
    plot: Path | None,
    results_name: str,
    bytes_plot: Path | None = None,
) -> str:
    meta = report["meta"]
    # Sections kept from earlier invocations were measured by other commands.
    kept = (meta.get("kept_sections") or {}).values()
    commands = list(dict.fromkeys([meta["command"], *(info["command"] for info in kept)]))
    figure_source = (
        f"Figure: {' and '.join(f'`{c}`' for c in commands)}, then `{REPORT_COMMAND}`.\n"
    )
    parts = [f"## Sync batch-norm cost (`{results_name}`)\n"]
    if plot is not None:
        parts += [
            f"![Step time relative to plain batch norm vs replicas]({plot.name})\n",
            figure_source,
            overhead_conclusion(report),
        ]
    if bytes_plot is not None:
        parts += [
            f"![Batch-norm bytes per step vs replicas]({bytes_plot.name})\n",
            figure_source.replace("Figure:", "Figure (the analytic floor's scaling model):"),
        ]
    parts.append(render_tables("benchmark.sync_bn.run", report, results_name, meta["command"]))
    return "\n".join(parts)


def report_section(report: dict[str, Any], out: Path, results_name: str) -> str:
    """`REPORT.md`'s section of `results_name`; its plots, where drawable, go into `out`."""
    plot = out / results_name.replace(".json", "_overhead.png")
    drawn = plot_overhead(report, plot)
    bytes_plot = out / results_name.replace(".json", "_bytes.png")
    bytes_drawn = plot_batch_norm_bytes(report, bytes_plot)
    return sync_bn_section(
        report, plot if drawn else None, results_name, bytes_plot if bytes_drawn else None
    )
