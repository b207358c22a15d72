"""The floor section's markdown: the probe table, the whole-model table and the scaling model.

`render` turns the `floor` entry of `sync_bn.json` (from `floor.measure`) into the
"Analytic floor" section of `sync_bn.md`.
"""

from __future__ import annotations

from typing import Any

from benchmark.common import markdown_table
from benchmark.sync_bn.common import RESNET_VARIANT_LABELS, RESNET_VARIANTS, fmt, markdown_section
from benchmark.sync_bn.floor_scaling import SCALING_VARIANTS


def _probe_cells(probe: dict[str, Any]) -> list[Any]:
    layer = probe["per_layer"]
    rule = probe["gradient_rule"]
    return [
        probe["replicas"],
        *(
            f"{layer[v]['all_reduces']}, {layer[v]['bytes_per_channel']:g} B x C"
            + (f" + {layer[v]['fixed_bytes']:g} B" if layer[v]["fixed_bytes"] else "")
            if v in layer
            else "n/a"
            for v in RESNET_VARIANTS[1:]
        ),
        f"{rule['collectives_per_step']:g} packed all-reduce(s), "
        f"{rule['bytes_per_parameter']:g} B / parameter",
        f"{probe['collective_cost']['latency_us']:.0f} us",
        f"{probe['collective_cost']['bytes_per_s'] / 1e9:.2f} GB/s",
    ]


def _model_cells(row: dict[str, Any], variant: str, entry: dict[str, Any]) -> list[Any]:
    grad = row["gradient"]
    measured = entry["measured_overhead_ms"]
    agree = entry["traced_total_agrees"]
    return [
        row["model"],
        row["replicas"],
        RESNET_VARIANT_LABELS[variant],
        f"{entry['all_reduces']:g}",
        f"{entry['bytes'] / 1e3:.1f}",
        fmt(entry["floor_ms"], 2),
        "-" if measured is None else fmt(measured, 1),
        "-" if measured is None else fmt(entry["measured_over_floor"], 2),
        f"{grad['all_reduces']:g}",
        f"{grad['bytes'] / 1e6:.1f}",
        fmt(grad["floor_ms"], 1),
        f"{entry['bytes'] / grad['bytes']:.2e}",
        "-" if agree is None else ("yes" if agree else "NO"),
    ]


def render(floor: dict[str, Any]) -> str:
    probe_table = markdown_table(
        [
            "replicas",
            *(f"{RESNET_VARIANT_LABELS[v]} / layer" for v in RESNET_VARIANTS[1:]),
            "gradients (Keras optimizer)",
            "all-reduce latency",
            "all-reduce bandwidth",
        ],
        [_probe_cells(probe) for probe in floor["probes"]],
    )
    model_table = markdown_table(
        [
            "model",
            "replicas",
            "batch norm",
            "BN all-reduces",
            "BN kB",
            "BN floor ms",
            "measured overhead ms",
            "measured / floor",
            "gradient all-reduces",
            "gradient MB",
            "gradient floor ms",
            "BN bytes / gradient bytes",
            "= traced step",
        ],
        [
            _model_cells(row, variant, entry)
            for row in floor["rows"]
            for variant, entry in row["batch_norm"].items()
        ],
    )
    return markdown_section(
        "Analytic floor: all-reduces and bytes per training step",
        "Per replica and step. Per batch-norm layer of C channels, the all-reduces and bytes "
        "each replica contributes, traced from the layer (forward + backward, fitted on C = 3 "
        "and 5); the optimizer's gradient all-reduce, traced from a Keras `apply_gradients` "
        "step (one call with every gradient, which the strategy packs into one collective "
        "per pack, counted in the graph); and the cost of one all-reduce on this host: "
        "latency of a 4-byte one, and bandwidth of a 4 MiB one, each in a chain of dependent "
        "calls.",
        probe_table,
        "Whole model: the sums over its batch-norm layers and its trainable variables. Floor = "
        "all-reduces x latency + bytes / bandwidth, the time the collectives take if nothing "
        "else ran (batch-norm all-reduces are sequential along the network). Measured: the "
        "variant's step time minus plain's in the ResNet table (`-` when that row was not "
        "measured"
        + (
            f"; kept from the earlier run {floor['measured_from']['date_utc']}, "
            f"`{floor['measured_from']['command']}`, which measured the layer as it was then"
            if floor.get("measured_from")
            else ""
        )
        + "). A measured overhead far above the floor is compute, not communication. "
        "= traced step: the all-reduced tensors counted while tracing the ResNet step equal "
        "the batch-norm ones plus one per gradient.",
        model_table,
        *(scaling_blocks(floor["scaling"]) if floor.get("scaling") else []),
    )


def scaling_blocks(scaling: dict[str, Any]) -> list[str]:
    """The scaling model's paragraph, table and verdicts, for `render`."""
    rows = scaling["rows"]
    table = markdown_table(
        [
            "replicas",
            *(f"{RESNET_VARIANT_LABELS[v]} MB" for v in SCALING_VARIANTS),
            "gradient MB",
            *(f"{RESNET_VARIANT_LABELS[v]} / gradient" for v in SCALING_VARIANTS),
        ],
        [
            [
                r["replicas"],
                *(f"{r['batch_norm'][v]['bytes'] / 1e6:.2f}" for v in SCALING_VARIANTS),
                f"{r['gradient_bytes'] / 1e6:.1f}",
                *(f"{100 * r['batch_norm'][v]['over_gradient']:.1f}%" for v in SCALING_VARIANTS),
            ]
            for r in rows
        ],
    )
    fits = scaling["fits"]
    fit_text = "; ".join(
        f"{RESNET_VARIANT_LABELS[v]}: ({fits[v]['bytes_per_channel']['constant']:g} + "
        f"{fits[v]['bytes_per_channel']['per_replica']:g} K) B x C + "
        f"({fits[v]['fixed_bytes']['constant']:g} + {fits[v]['fixed_bytes']['per_replica']:g} K)"
        f" B, {fits[v]['all_reduces']} all-reduces"
        + ("" if fits[v]["exact"] else " (**probes off the line**)")
        for v in SCALING_VARIANTS
    )
    crossing = next(
        (r["replicas"] for r in rows if r["batch_norm"]["ours_gather"]["over_gradient"] >= 1), None
    )
    ours = [r["batch_norm"]["ours"]["bytes"] for r in rows]
    return [
        f"### Batch-norm bytes per step from 2 to {rows[-1]['replicas']} replicas: "
        f"{scaling['model']}",
        f"{scaling['model']}: {scaling['batch_norm_layers']} batch-norm layers, "
        f"{scaling['batch_norm_channels']:,} channels, "
        f"{scaling['trainable_parameters'] / 1e6:.1f} M trainable parameters. "
        "Bytes each replica sends per step (forward + backward), "
        "from each layer's traced bytes at "
        f"{', '.join(str(k) for k in scaling['probe_replicas'])} replicas, modelled as linear "
        f"in the replica count K: {fit_text}. Gradient: one packed float32 all-reduce of every "
        "parameter. A ring all-reduce moves about twice its payload per replica, whatever "
        "the kind, so the ratios hold on the wire.",
        table,
        "Ours' batch-norm bytes per step are "
        + (
            "the same at every replica count"
            if max(ours) == min(ours)
            else f"from {min(ours) / 1e6:.2f} to {max(ours) / 1e6:.2f} MB"
        )
        + f" ({ours[0] / 1e6:.2f} MB, {100 * rows[0]['batch_norm']['ours']['over_gradient']:.1f}%"
        " of the gradient all-reduce); the gather path's grow with K"
        + (f" and exceed the gradient all-reduce from {crossing} replicas." if crossing else "."),
    ]
