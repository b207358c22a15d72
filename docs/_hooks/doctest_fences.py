"""A griffe extension: docstrings' doctest examples render as Python console code blocks.

The package's docstrings write examples as doctest (`>>>` lines and their output), which
`pytest --doctest-modules` runs. Markdown would read a `>>>` line as three nested quotes, so
each doctest block (from a `>>>` line to the next blank line, as doctest delimits them) is
fenced as `pycon` before mkdocstrings renders the docstring; blocks already inside a fence are
left alone.
"""

from __future__ import annotations

from typing import Any

import griffe

FENCE = "```"


def fence_doctests(text: str) -> str:
    """Returns `text` with each doctest block wrapped in a ```` ```pycon ```` fence."""
    out: list[str] = []
    in_fence = in_doctest = False
    indent = ""
    for line in text.splitlines():
        stripped = line.strip()
        if in_doctest and not stripped:
            out.append(f"{indent}{FENCE}")
            in_doctest = False
        elif not in_doctest and stripped.startswith(FENCE):
            in_fence = not in_fence
        elif not in_doctest and not in_fence and stripped.startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}{FENCE}pycon")
            in_doctest = True
        out.append(line)
    if in_doctest:
        out.append(f"{indent}{FENCE}")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fences the doctest blocks of every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
