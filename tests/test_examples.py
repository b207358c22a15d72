"""The examples: notebooks in sync with their generator and runnable, and the multi-worker script.

Each notebook is executed top to bottom in a fresh kernel with
`TFSIM_EXAMPLE_SMALL=1` (fewer images and epochs), so a notebook that breaks
fails the suite. The committed notebooks must hold the generator's cells and
the outputs of a real run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _generator():
    spec = importlib.util.spec_from_file_location(
        "build_notebooks", EXAMPLES / "build_notebooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
NOTEBOOKS = sorted(GENERATOR.NOTEBOOKS)
FULL_RUN_MARKERS = {
    "unsupervised_hello_world.ipynb": "train (2140, 16, 16, 3) test (486, 16, 16, 3)",
    "sync_batchnorm.ipynb": "replicas in sync: 4",
    "supervised_hello_world.ipynb": "train (2140, 16, 16, 3) of which trained on (1116, 16, 16, 3)",
}


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_is_the_generated_one_with_real_outputs(name):
    committed = nbformat.read(EXAMPLES / name, as_version=4)
    generated = GENERATOR.build(GENERATOR.NOTEBOOKS[name])
    assert [(c.cell_type, c.source) for c in committed.cells] == [
        (c.cell_type, c.source) for c in generated.cells
    ], f"{name} differs from examples/build_notebooks.py: rebuild it with --execute"
    code = [c for c in committed.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code), "every code cell must have been run"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    images = [o for c in code for o in c.outputs if "image/png" in o.get("data", {})]
    assert images  # the plots are real outputs
    # A full run, not the test suite's small one.
    printed = "".join(o.get("text", "") for c in code for o in c.outputs)
    assert FULL_RUN_MARKERS[name] in printed


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_top_to_bottom(name, tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("TFSIM_EXAMPLE_SMALL", "1")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    # ipykernel's own kernel spec ("python3", this interpreter) needs no `kernelspec install`.
    client = NotebookClient(
        notebook,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, on any error
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]


@pytest.mark.slow
def test_multi_worker_script_trains_one_model_on_two_workers(tmp_path):
    output = tmp_path / "out"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    options = [
        "--data",
        "digits",
        "--limit",
        "200",
        "--batch-size",
        "32",
        "--projector-dim",
        "32",
        "--epochs",
        "1",
    ]
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "multi_worker.py"), "--output", str(output), *options],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((output / "summary.json").read_text())
    assert summary["replicas"] == 2 and summary["strategy"] == "multi-worker"
    assert summary["batch_norm"] == "synchronised over all 2 replicas"
    history = json.loads((output / "history.json").read_text())
    assert [r["epoch"] for r in history["epochs"]] == [1]
    assert (output / "model.keras").is_file()
    assert (output / "worker-1" / "logs").is_dir()  # the other worker wrote only its own files
    assert not (output / "worker-1" / "model.keras").exists()
