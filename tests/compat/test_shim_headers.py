"""Every 0.17 path shim starts with the same one-line header saying what it re-exports.

A shim is a module (not a package's `__init__`) listed among 0.17's module
paths in `test_module_paths.py` whose body is only a docstring, imports from
the package and `__all__`. Its docstring's first line is

    0.17 path: re-exports `A`, `B`.

or, when the names do not fit on a line, `0.17 path: re-exports `A`, `B` and
N more.`: the names are from its `__all__`, which is exactly what it imports.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.compat.test_module_paths import KEPT_017_PATHS

PACKAGE = Path(__file__).resolve().parents[2] / "tensorflow_similarity"
HEADER = re.compile(
    r"0\.17 path: re-exports (?P<names>`\w+`(?:, `\w+`)*)(?: and (?P<more>\d+) more)?\.$"
)


def source_of(module: str) -> Path | None:
    """The file of a plain module (`None` for a package's `__init__` or a missing path)."""
    path = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")
    return path if path.is_file() else None


def exported(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "__all__"
        ]:
            return list(ast.literal_eval(node.value))
    return None


def imported(tree: ast.Module) -> list[str]:
    """The names the module's imports bind (`from __future__` left out)."""
    return [
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module != "__future__"
        for alias in node.names
    ]


def is_shim(tree: ast.Module) -> bool:
    """Only a docstring, imports from the package (and `__future__`) and `__all__`."""
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    for node in body:
        if isinstance(node, ast.ImportFrom) and (
            node.module == "__future__" or (node.module or "").startswith(PACKAGE.name)
        ):
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "__all__"
        ]:
            continue
        return False
    return exported(tree) is not None


def shims() -> list[str]:
    found = []
    for module in sorted(KEPT_017_PATHS):
        path = source_of(module)
        if path is not None and is_shim(ast.parse(path.read_text())):
            found.append(module)
    return found


def test_the_classifier_finds_shims_and_leaves_out_modules_that_define_things():
    found = shims()
    assert {"tensorflow_similarity.api", "tensorflow_similarity.samplers.utils"} <= set(found)
    assert "tensorflow_similarity.losses.utils" not in found
    assert "tensorflow_similarity.types" not in found
    # Packages are not shims, even when their `__init__` only imports.
    assert "tensorflow_similarity.losses" not in found


@pytest.mark.parametrize("module", shims())
def test_each_shim_starts_with_the_header_naming_what_it_exports(module):
    tree = ast.parse(source_of(module).read_text())
    first_line = (ast.get_docstring(tree) or "").splitlines()[0]
    names = exported(tree)

    header = HEADER.match(first_line)

    assert header, f"{module}: {first_line!r} is not `0.17 path: re-exports `A`, `B`.`"
    named = re.findall(r"`(\w+)`", header["names"])
    assert len(set(named)) == len(named) and set(named) <= set(names), (module, named, names)
    assert len(named) + int(header["more"] or 0) == len(names), (module, named, names)
    if header["more"] is None:
        assert set(named) == set(names)
    assert sorted(imported(tree)) == sorted(names), f"{module} imports other than `__all__`"


def test_only_shims_carry_the_header():
    carriers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if docstring.startswith("0.17 path:"):
            relative = path.relative_to(PACKAGE.parent).with_suffix("")
            carriers.append(".".join(relative.parts))
    assert sorted(carriers) == shims()
