"""The fenced code blocks of the README and the documentation site, for the tests beside this.

Sybil runs the Python blocks (`sybil_for_python`); this module also finds every fenced block
itself, with no Sybil involved, so that the tests can check that Sybil saw each Python block
and can compile, import-check and parse the blocks that Sybil does not run.
"""

from __future__ import annotations

import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

from sybil import Sybil
from sybil.parsers.markdown import ClearNamespaceParser, PythonCodeBlockParser, SkipParser

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def documents() -> list[Path]:
    """The README and every Markdown page under `docs/` (the site's hooks folder excepted)."""
    pages = sorted(path for path in DOCS.rglob("*.md") if "_hooks" not in path.parts)
    return [REPO / "README.md", *pages]


def document_id(path: Path) -> str:
    """`path` relative to the repository, as a test id."""
    return path.relative_to(REPO).as_posix()


def sybil_for_python() -> Sybil:
    """The Sybil that runs a page's Python blocks in order, in one namespace per page.

    `<!-- skip: next "reason" -->` before a block skips it (Sybil's skip syntax); `<!--
    clear-namespace -->` starts a fresh namespace.
    """
    return Sybil(
        parsers=[PythonCodeBlockParser(), SkipParser(), ClearNamespaceParser()],
        patterns=["*.md"],
    )


_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)"
    r"^(?P=indent)(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
_SKIP = re.compile(r"<!--\s*skip:\s*next\b(?P<reason>[^>]*)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    source: str  # dedented by the fence's indentation
    skip_reason: str | None  # the reason of a `<!-- skip: next ... -->` right before it

    @property
    def where(self) -> str:
        return f"{document_id(self.path)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced code block of `path`, in order."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _SKIP.search(before.strip()) if before.strip().startswith("<!--") else None
        indent = match["indent"]
        body = textwrap.dedent(match["body"]) if indent else match["body"]
        blocks.append(
            Block(
                path=path,
                line=text.count("\n", 0, match.start()) + 1,
                language=match["info"].strip().split(" ")[0].lower(),
                source=body,
                skip_reason=None if skip is None else skip["reason"].strip(),
            )
        )
    return blocks


def python_blocks(path: Path) -> list[Block]:
    """The ```python blocks of `path`."""
    return [block for block in fenced_blocks(path) if block.language in ("python", "py")]


def shell_commands(block: Block, program: str) -> list[list[str]]:
    """The command lines of a shell block that run `program`, as argument lists.

    Continuation lines (a trailing backslash) are joined, comments dropped, and a line is split
    at `&&`, `||`, `;` and `|`; each part whose first word is `program` is returned without it.
    Environment assignments before the program (`A=1 tfsim ...`) are skipped.
    """
    joined = re.sub(r"\\\n", " ", block.source)
    commands = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        part: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", "||", ";", "|"):
                while part and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", part[0]):
                    part = part[1:]
                if part and part[0] == program:
                    commands.append(part[1:])
                part = []
            else:
                part.append(word)
    return commands
