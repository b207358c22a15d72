"""What the benchmark scripts share: markdown tables and loading one script from another.

The scripts run as `python benchmark/<name>.py`, which puts this folder on
`sys.path`, so they import this module by its file name. Code that runs
from elsewhere (the tests) puts the folder on `sys.path` first.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

BENCHMARK_DIR = Path(__file__).resolve().parent


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table, cells formatted with `str`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def load_benchmark_module(name: str) -> ModuleType:
    """Imports `benchmark/<name>.py` as module `benchmark_<name>`, without running its main.

    Imported once per process: a second call returns the same module.
    """
    module_name = f"benchmark_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, BENCHMARK_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    # Dataclasses resolve their annotations through sys.modules.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module
