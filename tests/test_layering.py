"""Which part of the package may import which: each imports only parts below it.

The order, from the leaves up. A module may import its own part and any part
of a lower rank, never one of the same or a higher rank: so there is no import
cycle between parts, whatever order the package's `__init__` imports them in.
`docs/development.md` explains the order.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tensorflow_similarity"

RANKS = {
    # Leaves: no other part of the package.
    "_validation": 0,
    "_requirements": 0,
    "_atomic": 0,
    "types": 0,
    # The package's helpers, and its data and metrics.
    "l2_normalize": 1,
    "collectives": 1,
    "layer_walk": 1,
    "augmenters": 1,
    "datasets": 1,
    "schedules": 1,
    "classification_metrics": 1,
    "retrieval_metrics": 1,
    "matchers": 1,
    "utils": 1,
    "visualization": 1,
    "samplers": 1,
    "optimizers": 1,
    # Distances, layers, stores, evaluators.
    "distances": 2,
    "layers": 2,
    "stores": 2,
    "evaluators": 2,
    # Losses, search, the sync batch norm plugin.
    "losses": 3,
    "search": 3,
    "distribute": 3,
    "indexer": 4,
    # 0.17's masked reductions: re-exported from `losses.utils`, adapters over `losses.mining`.
    "algebra": 4,
    "training_metrics": 4,
    "callbacks": 5,
    # Exports a model with its index: reads both through the model's hooks, imports neither.
    "serving": 5,
    "models": 6,
    "architectures": 7,
    "cli": 8,
    # 0.17's one-stop module, the package's entry points and the test tooling import anything.
    "api": 9,
    "__main__": 9,
    "__init__": 9,
    "testing": 9,
}


def part_of(module: str) -> str:
    """`tensorflow_similarity.losses.simclr` -> `losses`; the package itself -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports_of(path: Path) -> list[tuple[int, str]]:
    """`(line, module)` of every import of the package in the file at `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE.name):
            if node.module == PACKAGE.name:
                found += [(node.lineno, f"{PACKAGE.name}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith(PACKAGE.name)]
    return found


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(relative.parts)
        yield path, "__init__" if name == f"{PACKAGE.name}.__init__" else part_of(name)


def test_every_part_of_the_package_has_a_rank():
    assert sorted({part for _, part in modules()} - set(RANKS)) == []


def test_no_part_imports_a_part_of_its_rank_or_above():
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line} ({part}, rank {RANKS[part]}) imports "
        f"{module} ({part_of(module)}, rank {RANKS[part_of(module)]})"
        for path, part in modules()
        for line, module in imports_of(path)
        if part_of(module) != part and RANKS[part_of(module)] >= RANKS[part]
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from tensorflow_similarity.models import SimilarityModel\n", "models"),
        ("from tensorflow_similarity import collectives\n", "collectives"),
        ("import tensorflow_similarity.layers.sync_batch_norm\n", "layers"),
    ],
)
def test_the_check_sees_each_form_of_import(tmp_path, source, expected):
    path = tmp_path / "module.py"
    path.write_text(source)
    assert [part_of(module) for _, module in imports_of(path)] == [expected]


def test_layers_imports_first_in_a_fresh_interpreter():
    code = (
        "import tensorflow_similarity.layers as layers, sys; "
        "from tensorflow_similarity import collectives; "
        "from tensorflow_similarity.distribute import collectives as old; "
        "assert old.gather_global_batch is collectives.gather_global_batch; print('ok')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", "PATH": ""},
        cwd=PACKAGE.parent,
    )
    assert result.stdout.strip() == "ok", result.stderr[-2000:]


# What a method may use of the model is `MethodContext`: the algorithms import none of the
# modules that make the model, even for type hints.
MODEL_MODULES = ("contrastive", "contrastive_model", "contrastive_step", "teacher", "factory")


def test_the_algorithms_never_import_the_model():
    algorithms = PACKAGE / "models" / "algorithms"
    wrong = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in sorted(algorithms.rglob("*.py"))
        for line, module in imports_of(path)
        if module.split(".")[1:3] in (["models", name] for name in MODEL_MODULES)
    ]
    assert wrong == []
