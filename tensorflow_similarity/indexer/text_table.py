"""Plain-text tables, as the index (and the models' index verbs) print statistics and results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def format_table(rows: Sequence[Sequence[Any]], headers: Sequence[str] | None = None) -> str:
    """Returns `rows` as left-aligned text columns, with an underlined header row."""

    def text(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = [[text(v) for v in row] for row in rows]
    if headers is not None:
        lines = [list(headers), ["-" * len(h) for h in headers], *lines]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))] if lines else []
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )
