"""The glyphs' own section of `REPORT.md`: why the jobs left scikit-learn's 8x8 digits.

Part of `python -m benchmark.report`, which imports it. `unseen_digits.json` was
written by a benchmark removed since (it is in the project's history); the glyphs
runs' sections are rendered by `runs.py` and `ssl_length.py` themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def digits_section(report: dict[str, Any], out: Path, results_name: str) -> str:
    """Why the jobs moved from the digits to glyphs: the digits' unseen-class ceiling.

    `out` is unused (the section has no plot); it is part of every section's signature.
    """

    def spread(method: str, protocol: str = "loo", group: str = "unseen") -> str:
        values = [report["figures"][str(seed)][method][protocol][group] for seed in report["seeds"]]
        return ", ".join(f"{value:.3f}" for value in values)

    seeds = ", ".join(str(seed) for seed in report["seeds"])
    return "\n".join(
        [
            f"## What the 8x8 digits could not show (`{results_name}`)\n",
            f"Measured {report['date'][:10]} by `{report['command']}` (removed since; in the "
            "project's history), on the supervised job's default run when it trained on "
            "scikit-learn's digits 0-5. Unseen-class (6-9) recall@1, leave-one-out over all "
            f"1,797 digits, seeds {seeds}: raw pixels {spread('pixels')}; a linear metric "
            f"learnt on the seen classes (NCA) {spread('nca')}; the untrained network "
            f"{spread('untrained')}; the trained network {spread('trained')} (its seen "
            f"classes: {spread('trained', group='seen')}, the pixels' "
            f"{spread('pixels', group='seen')}). The pixels start near the ceiling, so a "
            "metric learnt on six digits, the network's or a textbook one, had almost no room "
            "to find the other four better, and the trained network stayed below its "
            'untrained self and the pixels: a first run read as "it does not work". Both '
            "jobs now default to glyphs (`tensorflow_similarity.datasets.load_glyphs`), where "
            "the raw pixels leave room to learn.\n",
        ]
    )
