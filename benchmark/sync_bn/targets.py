"""The targets of `benchmark.sync_bn`, checked against whatever sections a report holds.

The targets of the constant-size exchange, each with its figure, the bound and a
verdict (`met`, `NOT met`, or `not measured` where the report lacks the section or
the row):

1. forward bytes per layer constant in the number of replicas (ours' default path);
2. fewer added non-collective ops per layer than Keras';
3. ResNet-50 at the largest replica count: ours' step-time overhead over
   plain at most one third of Keras';
4. the same overhead within 1.5x of the analytic floor;
5. the first step (tracing and graph optimisation) at most 1.5x plain's.
"""

from __future__ import annotations

from typing import Any

from benchmark.common import markdown_table
from benchmark.sync_bn.common import OURS_PATHS, VARIANT_LABELS, fmt, markdown_section

OVERHEAD_SHARE = 1 / 3
FLOOR_FACTOR = 1.5
FIRST_STEP_FACTOR = 1.5
MODEL = "ResNet-50"


REFERENCE = "reference"


def verdict(ok: bool | str | None) -> str:
    """`met`, `NOT met`, `not measured` (`None`), or `-` for a reference row."""
    if ok == REFERENCE:
        return "-"
    return "not measured" if ok is None else ("**met**" if ok else "**NOT met**")


def largest_resnet_row(report: dict[str, Any]) -> dict[str, Any] | None:
    rows = [r for r in report.get("resnet_step_time") or [] if r["model"] == MODEL]
    return max(rows, key=lambda r: r["replicas"]) if rows else None


def bytes_target(report: dict[str, Any]) -> list[Any]:
    rows = [r for r in report.get("collectives") or [] if r["variant"] == "ours"]
    fits = {r["replicas"]: r["forward_bytes"] for r in rows if "forward_bytes" in r}
    ok = (
        None if len(fits) < 2 else len({(f["per_channel"], f["fixed"]) for f in fits.values()}) == 1
    )
    figure = ", ".join(
        f"{k}: {f['per_channel']:g} C + {f['fixed']:g} B" for k, f in sorted(fits.items())
    )
    return ["forward bytes per layer constant in K (ours)", figure or "-", "same at every K", ok]


def ops_target(report: dict[str, Any]) -> list[Any]:
    rows = report.get("collectives") or []
    if not rows:
        return ["added ops per layer fewer than Keras'", "-", "< Keras'", None]
    replicas = max(r["replicas"] for r in rows if r["replicas"] <= 4)
    ops = {
        r["variant"]: r["extra_compute_ops_per_layer"] for r in rows if r["replicas"] == replicas
    }
    ours = [v for v in OURS_PATHS if v in ops]
    ok = all(ops[v] < ops["keras"] for v in ours)
    figure = ", ".join(f"{label(v)} {fmt(ops[v], 1)}" for v in (*ours, "keras"))
    return [f"added ops per layer ({replicas} replicas)", figure, "< Keras'", ok]


def overhead_targets(report: dict[str, Any]) -> list[list[Any]]:
    row = largest_resnet_row(report)
    if row is None:
        return [
            [f"{MODEL}: ours' overhead <= 1/3 of Keras'", "-", "<= 0.33", None],
            [f"{MODEL}: ours' overhead <= {FLOOR_FACTOR}x the floor", "-", "<= 1.5", None],
            [f"{MODEL}: first step <= {FIRST_STEP_FACTOR}x plain's", "-", "<= 1.5", None],
        ]
    replicas = row["replicas"]
    over = row["over_plain"]
    keras_overhead = over["keras"] - 1.0
    targets = []
    for variant in (v for v in OURS_PATHS if v in over):
        share = (over[variant] - 1.0) / keras_overhead if keras_overhead > 0 else None
        targets.append(
            [
                f"{MODEL}, {replicas} replicas: {label(variant)} overhead / Keras' overhead",
                "-"
                if share is None
                else f"{fmt(share, 2)} (x{over[variant]:.2f} vs Keras x{over['keras']:.2f})",
                f"<= {OVERHEAD_SHARE:.2f}",
                None if share is None else share <= OVERHEAD_SHARE,
            ]
        )
    floor_rows = [
        r
        for r in (report.get("floor") or {}).get("rows", [])
        if r["model"] == MODEL and r["replicas"] == replicas
    ]
    keras_floor = floor_rows[0]["batch_norm"].get("keras") if floor_rows else None
    for variant in (v for v in OURS_PATHS if v in over):
        entry = floor_rows[0]["batch_norm"].get(variant) if floor_rows else None
        if entry is None or keras_floor is None:
            continue
        # The share if both layers cost only their all-reduces (2 per layer vs Keras' 5).
        targets.append(
            [
                f"{MODEL}, {replicas} replicas: {label(variant)} floor / Keras' floor",
                f"{fmt(entry['floor_ms'] / keras_floor['floor_ms'], 2)} "
                f"({fmt(entry['floor_ms'], 0)} ms vs {fmt(keras_floor['floor_ms'], 0)} ms)",
                "(reference)",
                REFERENCE,
            ]
        )
    for variant in (v for v in OURS_PATHS if v in over):
        entry = floor_rows[0]["batch_norm"].get(variant) if floor_rows else None
        ratio = None if entry is None else entry.get("measured_over_floor")
        targets.append(
            [
                f"{MODEL}, {replicas} replicas: {label(variant)} measured overhead / floor",
                "-"
                if ratio is None
                else f"{fmt(ratio, 2)} ({fmt(entry['measured_overhead_ms'], 0)} ms vs "
                f"{fmt(entry['floor_ms'], 0)} ms)",
                f"<= {FLOOR_FACTOR}",
                None if ratio is None else ratio <= FLOOR_FACTOR,
            ]
        )
    build = {v: row["trace_s"][v] + row["first_step_s"][v] for v in row["trace_s"]}
    for variant in (v for v in (*OURS_PATHS, "keras") if v in build):
        ratio = build[variant] / build["plain"]
        targets.append(
            [
                f"{MODEL}, {replicas} replicas: {label(variant)} first step / plain's",
                f"{fmt(ratio, 2)} ({fmt(build[variant], 0)} s vs {fmt(build['plain'], 0)} s)",
                f"<= {FIRST_STEP_FACTOR}" if variant != "keras" else "(reference)",
                REFERENCE if variant == "keras" else ratio <= FIRST_STEP_FACTOR,
            ]
        )
    return targets


def label(variant: str) -> str:
    return VARIANT_LABELS[variant].split(" `")[0] if variant == "ours" else VARIANT_LABELS[variant]


def render(report: dict[str, Any]) -> str:
    targets = [bytes_target(report), ops_target(report), *overhead_targets(report)]
    kept = (report["meta"].get("kept_sections") or {}).get("resnet")
    source = (
        f" The ResNet rows were kept from an earlier run ({kept['date_utc']}, "
        f"`{kept['command']}`): they measure the layer as it was then."
        if kept
        else ""
    )
    table = markdown_table(
        ["target", "measured", "bound", "verdict"],
        [[name, figure, bound, verdict(ok)] for name, figure, bound, ok in targets],
    )
    met = sum(t[3] is True for t in targets)
    measured = sum(t[3] is not None and t[3] != REFERENCE for t in targets)
    return markdown_section(
        "Targets",
        "Each target of the constant-size exchange against this report's tables; "
        "`not measured` where the table or row is missing. The ResNet figures are at the "
        "largest replica count measured; first step = tracing + the first step (graph "
        "optimisation), as in the ResNet table's build column. The floor rows are the "
        "share ours would have if both layers cost only their all-reduces (2 per layer "
        "against Keras' 5); the measured share falls under it only as far as Keras' "
        "measured overhead exceeds its own floor." + source,
        table,
        f"{met} of the {measured} measured targets met.",
    )
