"""What the benchmark scripts share: tables, where results go, loading one script from another.

The scripts run as `python benchmark/<name>.py`, which puts this folder on
`sys.path`, so they import this module by its file name. Code that runs
from elsewhere (the tests) puts the folder on `sys.path` first.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

BENCHMARK_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCHMARK_DIR / "results"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table, cells formatted with `str`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def output_folder(out: Path | None, quick: bool, name: str) -> Path:
    """The folder a run writes its results to, said on screen for a quick run.

    `benchmark/results` holds the full runs that `REPORT.md` is built from, so a
    quick (smoke) run never writes there unless asked to.

    Args:
        out: The folder the user asked for, or `None`.
        quick: Whether this is a quick run.
        name: The script's name, the prefix of a quick run's folder.

    Returns:
        `out` if given; else, for a quick run, a new temporary folder; else
        `benchmark/results`.
    """
    if out is not None:
        return out
    if not quick:
        return RESULTS_DIR
    folder = Path(tempfile.mkdtemp(prefix=f"{name}_quick_"))
    print(
        f"Quick run: results go to {folder} ({RESULTS_DIR} keeps the full run's; "
        "--out chooses the folder).",
        flush=True,
    )
    return folder


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


def render_tables(name: str, report: dict[str, Any], results_name: str, command: str) -> str:
    """`benchmark/<name>.py`'s own tables for `report`, headings demoted two levels."""
    try:
        tables = load_benchmark_module(name).render_markdown(report)
    # The JSON may predate or postdate the script: say so rather than fail the report.
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        tables = (
            f"(`benchmark/{name}.py` cannot render `{results_name}`: "
            f"{type(error).__name__}: {error}. Rerun `{command}`.)\n"
        )
    return demote_headings(tables, 2)


def demote_headings(markdown: str, levels: int) -> str:
    """Turns `# x` into `### x` (for `levels=2`), so a benchmark's report nests in this one."""
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + levels) + " ", markdown, flags=re.M)
