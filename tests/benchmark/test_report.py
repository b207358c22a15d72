"""`benchmark/report.py`, the assembler: its list of sections and what it writes.

Each section is rendered by its benchmark's package (tested with that benchmark);
here, that the list behind `REPORT.md` still renders every section the committed
report has, in its order, so that none can be dropped silently.
"""

from __future__ import annotations

import json
import re

from benchmark import report
from benchmark.common import RESULTS_DIR


def headings(markdown: str) -> list[str]:
    return re.findall(r"^## .*$", markdown, flags=re.M)


def test_sections_render_every_heading_of_the_committed_report_in_order(tmp_path):
    rendered = []
    for name, render in report.SECTIONS.items():
        path = RESULTS_DIR / name
        if path.exists():
            section = render(json.loads(path.read_text()), tmp_path, name)
            assert section.startswith("## "), name
            rendered += headings(section)
    committed = headings((RESULTS_DIR / "REPORT.md").read_text())
    assert committed[0] == "## Machines"
    assert rendered == committed[1:]


def test_each_committed_results_file_has_a_section():
    skipped = {"determinism.json"}  # rendered in its own determinism.md, not in REPORT.md
    for path in RESULTS_DIR.glob("*.json"):
        assert path.name in report.SECTIONS or path.name in skipped, path.name
