"""The README: short, its links resolve, and its test command is the one .ci/run runs.

The site's own links are checked by `mkdocs build --strict`; the README is not part of the
site, so its links are checked here.
"""

from __future__ import annotations

import re
import shlex

from markdown.extensions.toc import slugify

from tests.docs.markdown_blocks import REPO, fenced_blocks

README = REPO / "README.md"
MAX_LINES = 200
_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _anchors(page) -> set[str]:
    """The heading anchors of a Markdown page, as MkDocs (and GitHub) make them."""
    text = page.read_text(encoding="utf-8")
    headings = re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)
    return {slugify(heading.replace("`", ""), "-") for heading in headings}


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_readme_links_resolve():
    links = _LINK.findall(README.read_text(encoding="utf-8"))
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 5
    for link in local:
        path, _, anchor = link.partition("#")
        target = (README.parent / path).resolve()
        assert target.exists(), f"README links to {link}, which does not exist"
        if anchor:
            assert anchor in _anchors(target), f"README links to {link}: no such heading"


def test_anchor_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Sync batch-norm cost (`sync_bn.json`)\n", encoding="utf-8")
    assert _anchors(page) == {"title", "sync-batch-norm-cost-sync_bnjson"}


def _commands(line: str) -> list[list[str]]:
    commands, part = [], []
    for word in [*shlex.split(line), "&&"]:
        if word == "&&":
            commands.append(part)
            part = []
        else:
            part.append(word)
    return commands


def _without_module_prefix(command: list[str]) -> list[str]:
    """`python3 -m pip ...` as `pip ...`: .ci/run spells each tool through the interpreter."""
    return command[2:] if command[:2] == ["python3", "-m"] else command


def test_readme_test_command_is_what_ci_runs():
    blocks = [block for block in fenced_blocks(README) if block.language == "bash"]
    lines = [line for block in blocks for line in block.source.splitlines()]
    test_lines = [line for line in lines if "pytest" in line]
    assert len(test_lines) == 1, test_lines
    ci = [
        _without_module_prefix(shlex.split(line))
        for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if re.match(r"python3 -m (pip|pytest)\b", line)
    ]
    for command in _commands(test_lines[0]):
        # .ci/run adds quiet flags (`-q`) and no cache; the rest must be the same words.
        matches = [run for run in ci if run[0] == command[0] and set(command[1:]) <= set(run[1:])]
        assert matches, f"README's `{' '.join(command)}` is not in .ci/run"
