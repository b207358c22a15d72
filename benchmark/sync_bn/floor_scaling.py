"""The floor's scaling model: batch-norm bytes per step extrapolated to many replicas.

`scaling_model` fits each synchronised batch norm's traced bytes per layer, probed
at a few replica counts by `floor.measure`, as linear in the replica count and sums
them over a model's batch-norm layers, next to the model's gradient all-reduce.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

SCALING_VARIANTS = ("keras", "ours", "ours_gather")


def scaling_model(
    probes: Sequence[dict[str, Any]], structure: dict[str, Any], replica_counts: Sequence[int]
) -> dict[str, Any]:
    """Batch-norm all-reduces and bytes per replica per step of a model, extrapolated in K.

    Each variant's traced bytes per layer, `per_channel * C + fixed` at each
    probed replica count, are modelled as linear in the replica count `K`
    (through the smallest and largest probe; `exact` says whether the probes in
    between lie on the line), then summed over the model's batch-norm layers
    for every count in `replica_counts`. The gradient all-reduce is 4 bytes
    per trainable parameter whatever `K`.

    Args:
        probes: The floor's per-replica-count probes (at least two counts).
        structure: `model_structure` of the model.
        replica_counts: Replica counts to model.

    Returns:
        The model's structure, each variant's fit and a row per replica count.
    """
    counts = [p["replicas"] for p in probes]
    fits = {}
    for variant in SCALING_VARIANTS:
        points = [(p["replicas"], p["per_layer"][variant]) for p in probes]
        (k0, low), (k1, high) = points[0], points[-1]
        fit = {"all_reduces": low["all_reduces"]}
        for key in ("bytes_per_channel", "fixed_bytes"):
            slope = (high[key] - low[key]) / (k1 - k0) if k1 != k0 else 0.0
            fit[key] = {"per_replica": slope, "constant": low[key] - slope * k0}
        fit["exact"] = (
            len(points) > 1
            and all(
                abs(_fitted(fit, key, k) - layer[key]) < 1e-9
                for k, layer in points
                for key in ("bytes_per_channel", "fixed_bytes")
            )
            and all(layer["all_reduces"] == fit["all_reduces"] for _, layer in points)
        )
        fits[variant] = fit
    gradient_bytes = 4 * structure["trainable_parameters"]
    rows = []
    for replicas in replica_counts:
        variants = {}
        for variant, fit in fits.items():
            payload = (
                _fitted(fit, "bytes_per_channel", replicas) * structure["batch_norm_channels"]
                + _fitted(fit, "fixed_bytes", replicas) * structure["batch_norm_layers"]
            )
            variants[variant] = {
                "all_reduces": fit["all_reduces"] * structure["batch_norm_layers"],
                "bytes": payload,
                "over_gradient": payload / gradient_bytes,
            }
        rows.append(
            {"replicas": replicas, "gradient_bytes": gradient_bytes, "batch_norm": variants}
        )
    return {
        "model": "ResNet-50 (keras.applications, 1000 classes)",
        "probe_replicas": counts,
        "batch_norm_layers": structure["batch_norm_layers"],
        "batch_norm_channels": structure["batch_norm_channels"],
        "trainable_parameters": structure["trainable_parameters"],
        "fits": fits,
        "rows": rows,
    }


def _fitted(fit: dict[str, Any], key: str, replicas: int) -> float:
    return fit[key]["constant"] + fit[key]["per_replica"] * replicas
