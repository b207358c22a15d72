"""The documentation site's generated pages: the command-line reference, the report, doctests.

`mkdocs build --strict` (in .ci/run) checks that the site builds without a warning; these
check what the hooks in docs/_hooks put into it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import sys

import pytest
from mkdocs.config import load_config
from mkdocs.structure.files import Files

from tensorflow_similarity.cli.parser import build_parser
from tensorflow_similarity.models.algorithms import algorithm_names
from tests.docs.markdown_blocks import REPO

HOOKS = REPO / "docs" / "_hooks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_docs_hooks_{name}", HOOKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


generated_pages = _load("generated_pages")
doctest_fences = _load("doctest_fences")


def _argparse_help(argv: list[str], monkeypatch) -> str:
    """What `tfsim ARGV --help` prints, through argparse's own --help action."""
    monkeypatch.setenv("COLUMNS", generated_pages.HELP_WIDTH)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([*argv, "--help"])
    assert exit_info.value.code == 0
    return out.getvalue()


def _top_level_commands(help_text: str) -> list[str]:
    """The sub-command names `tfsim --help` lists, read from its text."""
    block = help_text.split("positional arguments:")[1].split("options:")[0]
    return re.findall(r"^ {4}(\S+)", block, flags=re.MULTILINE)


def test_cli_reference_holds_every_subcommand_help(monkeypatch):
    page = generated_pages.cli_reference()
    top = _argparse_help([], monkeypatch)
    commands = _top_level_commands(top)
    assert "lookup" in commands and len(commands) >= 2
    assert top.rstrip() in page
    for command in commands:
        assert f"## `tfsim {command}`" in page
        assert _argparse_help([command], monkeypatch).rstrip() in page
    headings = re.findall(r"^## `tfsim (\S+)`$", page, flags=re.MULTILINE)
    assert headings == commands


def test_committed_cli_reference_is_what_the_parser_prints():
    committed = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert committed == generated_pages.cli_reference() + "\n", (
        "docs/cli.md is out of date: run python docs/_hooks/generated_pages.py"
    )


def test_committed_table_of_methods_is_the_registrys():
    page = generated_pages.METHODS_PAGE.read_text(encoding="utf-8")
    assert page == generated_pages.with_method_table(page), (
        "The table of methods in docs/guides/self-supervised.md is out of date: run "
        "python docs/_hooks/generated_pages.py"
    )
    table = page.split(generated_pages.METHODS_BEGIN)[1].split(generated_pages.METHODS_END)[0]
    names = re.findall(r'^\| `"(\w+)"` \|', table, flags=re.MULTILINE)
    assert tuple(names) == algorithm_names()


def test_the_table_of_methods_needs_its_markers():
    with pytest.raises(ValueError, match="must hold"):
        generated_pages.with_method_table("# A page without the markers\n")


def test_cli_reference_width_does_not_depend_on_the_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    narrow = generated_pages.cli_reference()
    monkeypatch.setenv("COLUMNS", "300")
    assert generated_pages.cli_reference() == narrow


def test_the_site_gets_the_report_and_its_figures():
    config = load_config(str(REPO / "mkdocs.yml"))
    files = config.plugins.on_files(Files([]), config=config)  # mkdocs.yml's hooks and plugins
    report = files.get_file_from_path("benchmark/REPORT.md")
    source = REPO / "benchmark" / "results" / "REPORT.md"
    assert report is not None
    assert report.content_string == source.read_text(encoding="utf-8")
    figures = re.findall(r"\]\(([^)\s]+\.png)\)", source.read_text(encoding="utf-8"))
    assert figures
    for figure in figures:
        site_file = files.get_file_from_path(f"benchmark/{figure}")
        assert site_file is not None, figure
        assert site_file.content_bytes == (source.parent / figure).read_bytes()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Plain text.", "Plain text."),
        (
            "Example:\n\n>>> x = 1\n>>> x\n1\n\nAfter.",
            "Example:\n\n```pycon\n>>> x = 1\n>>> x\n1\n```\n\nAfter.",
        ),
        (
            "Args:\n    a: An int.\n\n    >>> f(\n    ...     a=1)\n    2",
            "Args:\n    a: An int.\n\n    ```pycon\n    >>> f(\n    ...     a=1)\n    2\n    ```",
        ),
        # Already fenced: left alone.
        ("```python\n>>> x\n```", "```python\n>>> x\n```"),
        # Two blocks, each closed at its blank line.
        (">>> a\n\n>>> b", "```pycon\n>>> a\n```\n\n```pycon\n>>> b\n```"),
    ],
)
def test_doctest_blocks_are_fenced(text, expected):
    assert doctest_fences.fence_doctests(text) == expected
