"""Writes the table of tensorflow-similarity 0.17's public signatures, read from its source.

0.17 needs `tf-keras` and TensorFlow 2.15, so its modules are parsed with `ast`, never
imported. Every module under `tensorflow_similarity/` whose dotted path has no part
starting with `_` (except `__init__`) is public; in it, every top-level class and function
whose name does not start with `_` is recorded, and for a class every method it defines
whose name does not start with `_`, plus `__init__` (recorded as the class itself) and
`__call__`. Properties are left out. A class without its own `__init__` takes the first
base class's, when that base is a 0.17 class; a dataclass's parameters are its fields;
otherwise (a Keras or ABC base) its parameters are `null`.

Each parameter is recorded with its name, its kind (`inspect.Parameter`'s kind names)
and its default: `{"literal": True, "repr": ...}` for a default `ast.literal_eval` reads
(numbers, strings, `None`, tuples, lists, dicts of those), `{"literal": False, "repr":
<source text>}` for any other expression (`tf.keras.losses.Reduction.AUTO`), `None` when
there is none. `self` / `cls` are dropped from methods and class methods.

Usage:

    python tools/compat017/extract_signatures.py /path/to/0.17-checkout \
        [--output tests/compat/signatures_017.json]

where the checkout holds `tensorflow_similarity/` as of 0.17.1 (commit 6b67e0a of
github.com/tensorflow/similarity), e.g. from
`git archive 6b67e0a tensorflow_similarity | tar -x -C /path/to/0.17-checkout`.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

PACKAGE = "tensorflow_similarity"
SOURCE = "tensorflow-similarity 0.17.1 (github.com/tensorflow/similarity commit 6b67e0a)"
DEFAULT_OUTPUT = Path(__file__).resolve().parents[2] / "tests" / "compat" / "signatures_017.json"


def module_name(path: Path, root: Path) -> str | None:
    """The dotted name of the module at `path`, or `None` if a part of it is private."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if any(part.startswith("_") for part in parts):
        return None
    return ".".join(parts)


def default_of(node: ast.expr | None) -> dict[str, Any] | None:
    if node is None:
        return None
    try:
        return {"literal": True, "repr": repr(ast.literal_eval(node))}
    except ValueError:
        return {"literal": False, "repr": ast.unparse(node)}


def parameters_of(function: ast.FunctionDef | ast.AsyncFunctionDef, drop_first: bool) -> list:
    """The parameters of `function` as (name, kind, default) records, in order."""
    args = function.args
    positional = [(a, "POSITIONAL_ONLY") for a in args.posonlyargs]
    positional += [(a, "POSITIONAL_OR_KEYWORD") for a in args.args]
    # Defaults belong to the last positional parameters.
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    records = [
        {"name": arg.arg, "kind": kind, "default": default_of(default)}
        for (arg, kind), default in zip(positional, defaults, strict=True)
    ]
    if drop_first and records:
        records.pop(0)
    if args.vararg is not None:
        records.append({"name": args.vararg.arg, "kind": "VAR_POSITIONAL", "default": None})
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        records.append({"name": arg.arg, "kind": "KEYWORD_ONLY", "default": default_of(default)})
    if args.kwarg is not None:
        records.append({"name": args.kwarg.arg, "kind": "VAR_KEYWORD", "default": None})
    return records


def decorators(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> set[str]:
    return {ast.unparse(d).split("(")[0].split(".")[-1] for d in node.decorator_list}


def dataclass_fields(cls: ast.ClassDef) -> list[dict[str, Any]]:
    """A dataclass's constructor parameters: its annotated fields, in order."""
    records = []
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        if "ClassVar" in ast.unparse(node.annotation):
            continue
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "field":
            keywords = {k.arg: k.value for k in value.keywords}
            value = keywords.get("default", keywords.get("default_factory"))
            if "default_factory" in keywords and "default" not in keywords:
                value = ast.Call(func=value, args=[], keywords=[])
        records.append(
            {"name": node.target.id, "kind": "POSITIONAL_OR_KEYWORD", "default": default_of(value)}
        )
    return records


class Module:
    """One parsed 0.17 module: its classes, functions and where its imported names come from."""

    def __init__(self, name: str, tree: ast.Module) -> None:
        self.name = name
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.functions = {
            n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.imports: dict[str, tuple[str, str]] = {}
        package = name if name.count(".") == 0 else name.rsplit(".", 1)[0]
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                source = node.module
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - node.level + 1]
                    source = ".".join([*base, node.module])
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (source, alias.name)


def find_init(
    modules: dict[str, Module], module: Module, cls: ast.ClassDef, seen: set[str]
) -> ast.FunctionDef | None:
    """The `__init__` `cls` runs: its own, else its first 0.17 base's (recursively)."""
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            return node
    if not cls.bases:
        return None
    base = ast.unparse(cls.bases[0])
    if base in module.classes and base not in seen:
        return find_init(modules, module, module.classes[base], seen | {base})
    if base in module.imports:
        source, name = module.imports[base]
        for candidate in (source, f"{source}.__init__"):
            other = modules.get(candidate)
            if other is not None and name in other.classes:
                key = f"{other.name}.{name}"
                if key not in seen:
                    return find_init(modules, other, other.classes[name], seen | {key})
    return None


def extract(root: Path) -> list[dict[str, Any]]:
    """All public signatures of the `tensorflow_similarity` package under `root`."""
    package_dir = root / PACKAGE
    if not (package_dir / "__init__.py").is_file():
        raise SystemExit(f"{root} does not hold {PACKAGE}/__init__.py: pass a 0.17 checkout.")
    modules: dict[str, Module] = {}
    for path in sorted(package_dir.rglob("*.py")):
        name = module_name(path, root)
        if name is not None:
            modules[name] = Module(name, ast.parse(path.read_text(), filename=str(path)))
    entries = []
    for name, module in sorted(modules.items()):
        for function_name, function in sorted(module.functions.items()):
            if not function_name.startswith("_"):
                entries.append(
                    {
                        "module": name,
                        "qualname": function_name,
                        "kind": "function",
                        "parameters": parameters_of(function, drop_first=False),
                    }
                )
        for class_name, cls in sorted(module.classes.items()):
            if class_name.startswith("_"):
                continue
            init = find_init(modules, module, cls, {f"{name}.{class_name}"})
            if init is not None:
                parameters = parameters_of(init, drop_first=True)
            elif "dataclass" in decorators(cls):
                parameters = dataclass_fields(cls)
            else:
                parameters = None
            entries.append(
                {"module": name, "qualname": class_name, "kind": "class", "parameters": parameters}
            )
            for node in cls.body:
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if node.name.startswith("_") and node.name != "__call__":
                    continue
                marks = decorators(node)
                if "property" in marks or "setter" in marks or "deleter" in marks:
                    continue
                kind = "method"
                if "staticmethod" in marks:
                    kind = "staticmethod"
                elif "classmethod" in marks:
                    kind = "classmethod"
                entries.append(
                    {
                        "module": name,
                        "qualname": f"{class_name}.{node.name}",
                        "kind": kind,
                        "parameters": parameters_of(node, drop_first=kind != "staticmethod"),
                    }
                )
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "checkout", type=Path, help="a folder holding 0.17.1's tensorflow_similarity/"
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    entries = extract(args.checkout)
    table = {"source": SOURCE, "entries": entries}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(table, indent=1) + "\n")
    modules = len({entry["module"] for entry in entries})
    print(f"{len(entries)} signatures from {modules} modules -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
