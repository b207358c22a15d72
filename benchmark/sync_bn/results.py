"""The results of `python -m benchmark.sync_bn`: their file, JSON keys and markdown.

`stem_for` names the files (`sync_bn` or `sync_bn_gpu`), `SECTION_KEYS` the JSON
key of each section, `render_markdown` writes the whole `sync_bn.md` from the
report (each section's table by its own module), and `kept_from_earlier` reads
the sections an earlier report holds that this run does not measure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.sync_bn import (
    collectives,
    floor_tables,
    multiworker,
    resnet,
    robustness,
    step_time,
    targets,
)

# The JSON key of each section (the first three predate the others and stay as they are).
SECTION_KEYS = {
    "collectives": "collectives",
    "step_time": "step_time",
    "robustness": "robustness",
    "resnet": "resnet_step_time",
    "multiworker": "multiworker",
    "floor": "floor",
}


def render_markdown(report: dict[str, Any]) -> str:
    meta = report["meta"]
    header = (
        "# Sync batch-norm benchmark\n\n"
        f"- Machine: {meta['hardware']}; {meta['cpu_count']} CPUs; {meta['platform']}\n"
        f"- TensorFlow {meta['tensorflow']}, Keras {meta['keras']}, Python {meta['python']}\n"
        f"- Date (UTC): {meta['date_utc']}\n"
        f"- Command: `{meta['command']}`\n"
        f"- Timing: {meta['reps']} interleaved repetitions of {meta['steps_per_rep']} step(s) "
        "per variant, medians. Replicas are logical devices sharing one physical device, so "
        "the times measure synchronisation cost, not speed-up.\n"
    )
    kept = meta.get("kept_sections") or {}
    if kept:
        header += "".join(
            f"- `{name}` kept from an earlier run: {info['date_utc']}, `{info['command']}`\n"
            for name, info in kept.items()
        )
    device_label = "logical GPUs on one physical GPU" if meta["device"] == "gpu" else "logical CPUs"
    renderers = {
        "collectives": collectives.render,
        "step_time": step_time.render,
        "robustness": robustness.render,
        "resnet": lambda rows: resnet.render(rows, device_label),
        "multiworker": multiworker.render,
        "floor": floor_tables.render,
    }
    parts = [header]
    for name, render in renderers.items():
        if report.get(SECTION_KEYS[name]):
            parts.append(render(report[SECTION_KEYS[name]]))
    parts.append(targets.render(report))
    return "\n".join(parts)


def kept_from_earlier(path: Path, device: str, measured: Sequence[str]) -> dict[str, Any]:
    """The sections of an existing report, for the same device, that this run does not measure."""
    if not path.exists():
        return {}
    try:
        earlier = json.loads(path.read_text())
    except json.JSONDecodeError:
        return {}
    meta = earlier.get("meta", {})
    if meta.get("device") != device:
        return {}
    kept = {}
    for name, key in SECTION_KEYS.items():
        if name in measured or not earlier.get(key):
            continue
        origin = (meta.get("kept_sections") or {}).get(name) or {
            "date_utc": meta.get("date_utc"),
            "command": meta.get("command"),
        }
        kept[name] = {"data": earlier[key], "origin": origin}
    return kept


def stem_for(device: str) -> str:
    """File stem of the results: `sync_bn` on CPUs, `sync_bn_gpu` on GPUs."""
    return "sync_bn" if device == "cpu" else "sync_bn_gpu"
