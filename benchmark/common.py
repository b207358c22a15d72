"""What the benchmarks share: tables, where results go, the commands that run them.

Each benchmark is a module of this package, run from the repository root as
`python -m benchmark.<question>` (or `python -m benchmark.<question>.<script>`
where a question has several scripts); they import each other as
`benchmark.<...>`.
"""

from __future__ import annotations

import datetime
import gc
import importlib
import json
import os
import platform
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCHMARK_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCHMARK_DIR / "results"
# The folder `python -m benchmark....` runs from: child processes start there.
REPO_ROOT = BENCHMARK_DIR.parent
REPORT_COMMAND = "python -m benchmark.report"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table, cells formatted with `str`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def command_line(module: str, args: Sequence[str] = ()) -> str:
    """How a user runs `module` with `args`, as the results record it.

    Example: `command_line("benchmark.sync_bn", ["--quick"])` is
    `"python -m benchmark.sync_bn --quick"`.
    """
    return " ".join(["python", "-m", module, *args])


def output_folder(out: Path | None, quick: bool, name: str) -> Path:
    """The folder a run writes its results to, said on screen for a quick run.

    `benchmark/results` holds the full runs that `REPORT.md` is built from, so a
    quick (smoke) run never writes there unless asked to.

    Args:
        out: The folder the user asked for, or `None`.
        quick: Whether this is a quick run.
        name: The results' name, the prefix of a quick run's folder.

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


def machine_record() -> dict[str, Any]:
    """Today's date, the machine and its load average, the first keys of a results payload."""
    return {
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "load_average": os.getloadavg()[0],
    }


def write_results(
    out: Path, name: str, payload: dict[str, Any], render: Callable[[dict[str, Any]], str]
) -> str:
    """Writes `payload` to `out/<name>.json` and its report to `<name>.md`; returns the report."""
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
    report = render(payload)
    (out / f"{name}.md").write_text(report + "\n")
    return report


def render_tables(module: str, report: dict[str, Any], results_name: str, command: str) -> str:
    """`render_markdown(report)` of benchmark `module`, headings demoted two levels.

    The module is imported here, when its results are present, so that the report
    does not need every benchmark's dependencies.
    """
    try:
        tables = importlib.import_module(module).render_markdown(report)
    # The JSON may predate or postdate the script: say so rather than fail the report.
    except (KeyError, TypeError, AttributeError, ValueError) as error:
        tables = (
            f"(`{module}` cannot render `{results_name}`: "
            f"{type(error).__name__}: {error}. Rerun `{command}`.)\n"
        )
    return demote_headings(tables, 2)


def demote_headings(markdown: str, levels: int) -> str:
    """Turns `# x` into `### x` (for `levels=2`), so a benchmark's report nests in this one."""
    return re.sub(r"^(#+) ", lambda m: "#" * (len(m.group(1)) + levels) + " ", markdown, flags=re.M)


def seconds(fn: Callable[[], object]) -> float:
    """Wall-clock seconds of one call of `fn`, after a garbage collection."""
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired_medians(first: Callable, second: Callable, repeats: int) -> tuple[float, float]:
    """Median seconds of `first` and `second`, alternating which runs first, after a warm-up."""
    first(), second()
    times: tuple[list[float], list[float]] = ([], [])
    for repeat in range(repeats):
        order = (0, 1) if repeat % 2 == 0 else (1, 0)
        for which in order:
            times[which].append(seconds((first, second)[which]))
    return statistics.median(times[0]), statistics.median(times[1])
