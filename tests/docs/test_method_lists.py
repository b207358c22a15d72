"""Every list of self-supervised methods names all the registered ones.

Lists are written by hand in docstrings, the docs and the README (the command
line's help is built from the registry): a list that names four methods or
more names them all, so that a new method is not forgotten in the places that
list them. A list is a run of method names (`simsiam` or its title `SimSiam`,
quoted or not) joined by commas, semicolons, slashes, "and" or "or", or the
first column of a Markdown table.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

from tensorflow_similarity.cli import build_parser
from tensorflow_similarity.models.algorithms import algorithm_names, get_algorithm
from tests.docs.markdown_blocks import REPO, documents

# Lists that name some methods on purpose, by where they are and the methods they name.
SUBSETS = {
    # The losses that compare samples across the batch, whom accumulation does not make larger.
    (
        "tensorflow_similarity/models/contrastive.py",
        frozenset({"simclr", "mocov3", "barlow", "vicreg", "dino"}),
    ),
}
# docs/cli.md is the parser's help, checked against it in test_site_hooks.py.
GENERATED = {"docs/cli.md"}


def _spellings() -> dict[str, tuple[str, ...]]:
    return {name: (name, get_algorithm(name).display_name) for name in algorithm_names()}


def method_lists(text: str) -> list[tuple[str, set[str]]]:
    """The runs of method names in `text`, each with the registered names it holds."""
    spellings = _spellings()
    words = sorted({s for names in spellings.values() for s in names}, key=len, reverse=True)
    token = r"[`\"']*(?:" + "|".join(map(re.escape, words)) + r")[`\"']*"
    separator = r"(?:\s*[,;/]\s*(?:(?:or|and)\s+)?|\s+(?:or|and)\s+)"
    run = re.compile(rf"(?<![\w-]){token}(?:{separator}{token})+(?![\w-])", re.IGNORECASE)
    found = []
    for match in run.finditer(text):
        named = {
            name
            for name, forms in spellings.items()
            if any(
                re.search(rf"(?<![\w-]){re.escape(form)}(?![\w-])", match.group(0), re.IGNORECASE)
                for form in forms
            )
        }
        found.append((match.group(0), named))
    return found


def method_tables(text: str) -> list[tuple[str, set[str]]]:
    """The Markdown tables of `text`, each with the registered names its first column holds."""
    spellings = _spellings()
    found = []
    for table in re.findall(r"(?:^[ \t]*\|.*\n?)+", text, flags=re.MULTILINE):
        cells = {line.strip().split("|")[1].strip(" `\"'").lower() for line in table.splitlines()}
        named = {name for name, forms in spellings.items() if {f.lower() for f in forms} & cells}
        found.append((table.strip().splitlines()[0], named))
    return found


def _docstrings() -> list[tuple[str, str]]:
    texts = []
    for path in sorted((REPO / "tensorflow_similarity").rglob("*.py")):
        where = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
                docstring = ast.get_docstring(node)
                if docstring:
                    texts.append((where, docstring))
    return texts


def _pages() -> list[tuple[str, str]]:
    pages = [
        (str(path.relative_to(REPO)), path.read_text(encoding="utf-8")) for path in documents()
    ]
    return [(where, text) for where, text in pages if where not in GENERATED]


def _help() -> list[tuple[str, str]]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.choices and "pretrain" in a.choices]
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "1000"  # One line per entry: a list is not broken by wrapping.
    try:
        texts = [("tfsim --help", parser.format_help())]
        texts += [
            (f"tfsim {name} --help", sub.format_help()) for name, sub in commands.choices.items()
        ]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return texts


def test_the_finder_reads_lists_as_they_are_written():
    ((_, named),) = method_lists(
        "SimSiam, SimCLR, Barlow Twins, VICReg, and BYOL, MoCo v3 and DINO"
    )
    assert named == set(algorithm_names()[:7])
    assert [n for _, n in method_lists('`"simsiam"`, `"simclr"` or `"barlow"`. A dino head')] == [
        {"simsiam", "simclr", "barlow"}
    ]
    assert method_lists("the dino head, a simclr loss") == []
    table = '| algorithm | params |\n|---|---|\n| `simsiam` | 1 |\n| `"dino"` | 2 |\n'
    assert method_tables(table) == [("| algorithm | params |", {"simsiam", "dino"})]


@pytest.mark.parametrize("source", ["docstrings", "pages", "help"])
def test_every_list_of_four_methods_or_more_names_every_registered_one(source):
    texts = {"docstrings": _docstrings, "pages": _pages, "help": _help}[source]()
    # The package's methods: a test's own method (tests/cli/one_module_method.py) may still be
    # registered in this process, and no page of the package names it.
    registered = {
        name
        for name in algorithm_names()
        if type(get_algorithm(name)).__module__.startswith("tensorflow_similarity.")
    }
    stale = [
        f"{where}: {text!r} lacks {sorted(registered - named)}"
        for where, doc in texts
        for text, named in method_lists(doc) + method_tables(doc)
        if len(named) >= 4 and named != registered and (where, frozenset(named)) not in SUBSETS
    ]
    assert not stale, "\n".join(stale)
