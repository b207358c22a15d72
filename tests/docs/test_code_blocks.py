"""Every code block of the README and the documentation site works.

* Python blocks run, page by page and in order (Sybil), so no example rots. A block that needs
  a GPU, a cluster or data that is not shipped is marked `<!-- skip: next "reason" -->`; it and
  every other Python block are still compiled, and the modules and names they import are
  imported (`test_python_blocks_compile_and_import`).
* Shell blocks are not run, but every `tfsim ...` command line in them must parse with the real
  argument parser.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import itertools
import unittest

import pytest
import tensorflow as tf
from sybil.example import NotEvaluated
from sybil.parsers.markdown import PythonCodeBlockParser

from tests.docs.markdown_blocks import (
    document_id,
    documents,
    fenced_blocks,
    python_blocks,
    shell_commands,
    sybil_for_python,
)

DOCUMENTS = documents()
WITH_PYTHON = [path for path in DOCUMENTS if python_blocks(path)]
# Pages whose blocks train a real architecture (a ResNet-18 on the glyphs): minutes on a
# shared CPU, so out of the fast loop (`-m "not slow"`); CI runs them.
SLOW_PAGES = {"README.md", "docs/getting-started.md"}
SHELLS = ("bash", "sh", "shell", "console")


# The replicas a page's `MirroredStrategy()` gets in this process, where it would otherwise
# take all 8 logical CPUs of tests/conftest.py: tracing a synchronised step grows with the
# replica count, and 2 still makes every batch norm a cross-replica one.
DOC_REPLICAS = 2


class _FreshKeysMirroredStrategy(tf.distribute.MirroredStrategy):
    """A MirroredStrategy with collective keys of its own, over 2 devices when none is named.

    Each page is a program of its own, but the pages run in one test process, where two
    MirroredStrategy objects would reuse the same collective keys: a collective of the second
    would meet the first's instance of another shape. A page's `MirroredStrategy()` means
    "all visible GPUs, else the CPU": on a machine without GPUs, as here, it gets the first
    `DOC_REPLICAS` logical CPUs.
    """

    _key_bases = itertools.count(start=1_000_000, step=100_000)

    def __init__(self, devices=None, cross_device_ops=None):
        self._collective_key_base = next(self._key_bases)
        if devices is None and not tf.config.list_logical_devices("GPU"):
            devices = [d.name for d in tf.config.list_logical_devices("CPU")[:DOC_REPLICAS]]
        super().__init__(devices, cross_device_ops)


def _page_param(path):
    marks = [pytest.mark.slow] if document_id(path) in SLOW_PAGES else []
    return pytest.param(path, id=document_id(path), marks=marks)


def test_the_pages_hold_python_blocks():
    # The collection itself can fail: a moved docs folder would leave nothing to run.
    assert "README.md" in {document_id(path) for path in WITH_PYTHON}
    assert any(document_id(path).startswith("docs/guides/") for path in WITH_PYTHON)


def test_a_pages_strategy_synchronises_two_replicas_unless_it_names_its_devices():
    assert _FreshKeysMirroredStrategy().num_replicas_in_sync == DOC_REPLICAS > 1
    one = tf.config.list_logical_devices("CPU")[:1]
    assert _FreshKeysMirroredStrategy([d.name for d in one]).num_replicas_in_sync == 1


@pytest.mark.parametrize("path", [_page_param(path) for path in WITH_PYTHON])
def test_python_blocks_run(path, tmp_path, monkeypatch):
    # Blocks that write files write them in a fresh folder.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tf.distribute, "MirroredStrategy", _FreshKeysMirroredStrategy)
    document = sybil_for_python().parse(path)
    ran, skipped = [], []
    for example in document.examples():
        try:
            example.evaluate()
        except (unittest.SkipTest, NotEvaluated):
            skipped.append(example.line)
            continue
        except Exception as error:
            raise AssertionError(
                f"{document_id(path)}, the block at line {example.line} failed: "
                f"{type(error).__name__}: {error}"
            ) from error
        if isinstance(example.region.parsed, str):  # a code block, not a skip directive
            ran.append(example.line)
    marked = [block.line for block in python_blocks(path) if block.skip_reason is not None]
    assert len(ran) + len(marked) == len(python_blocks(path)), (ran, marked)


@pytest.mark.parametrize("path", [_page_param(path) for path in WITH_PYTHON])
def test_sybil_sees_every_python_block(path):
    # A block Sybil does not recognise (an odd fence, say) would silently never run.
    regions = [
        region
        for region in PythonCodeBlockParser()(sybil_for_python().parse(path))
        if isinstance(region.parsed, str)
    ]
    assert [region.start for region in regions]  # Sybil found blocks at all
    assert len(regions) == len(python_blocks(path))


def test_skipped_blocks_say_why():
    for path in DOCUMENTS:
        for block in python_blocks(path):
            if block.skip_reason is not None:
                assert block.skip_reason.strip('"'), f"{block.where}: give the reason to skip"


def _imports(tree: ast.AST) -> list[tuple[str, list[str]]]:
    """`(module, names)` of each import statement in `tree`; names empty for `import x`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module, [alias.name for alias in node.names]))
    return found


ALL_PYTHON_BLOCKS = [
    pytest.param(block, id=block.where) for path in DOCUMENTS for block in python_blocks(path)
]


@pytest.mark.parametrize("block", ALL_PYTHON_BLOCKS)
def test_python_blocks_compile_and_import(block):
    try:
        tree = ast.parse(block.source, filename=block.where)
    except SyntaxError as error:
        pytest.fail(f"{block.where}: {error}")
    compile(tree, block.where, "exec")
    for module_name, names in _imports(tree):
        module = importlib.import_module(module_name)
        for name in names:
            if not hasattr(module, name):
                # `from package import submodule` imports the submodule.
                importlib.import_module(f"{module_name}.{name}")


def test_import_check_can_fail():
    tree = ast.parse("from tensorflow_similarity.layers import NoSuchLayer\nimport os.path")
    assert _imports(tree) == [
        ("tensorflow_similarity.layers", ["NoSuchLayer"]),
        ("os.path", []),
    ]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("tensorflow_similarity.layers.NoSuchLayer")


TFSIM_COMMANDS = [
    pytest.param(command, id=f"{block.where} tfsim {' '.join(command)}")
    for path in DOCUMENTS
    for block in fenced_blocks(path)
    if block.language in SHELLS
    for command in shell_commands(block, "tfsim")
]


def test_the_docs_hold_tfsim_commands():
    assert len(TFSIM_COMMANDS) >= 4


@pytest.mark.parametrize("command", TFSIM_COMMANDS)
def test_tfsim_commands_parse(command):
    from tensorflow_similarity.cli.parser import build_parser

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            build_parser().parse_args(command)
    except SystemExit as error:
        pytest.fail(f"tfsim {' '.join(command)}: exit {error.code}: {stderr.getvalue()}")


def test_a_wrong_tfsim_command_fails_to_parse():
    from tensorflow_similarity.cli.parser import build_parser

    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        build_parser().parse_args(["pretrain", "--no-such-option"])
