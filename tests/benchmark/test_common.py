"""`benchmark.common`: where a benchmark run writes, and how a command is recorded."""

from __future__ import annotations

import tempfile

from benchmark import common


def test_an_explicit_folder_wins_quick_or_not(tmp_path):
    assert common.output_folder(tmp_path, quick=True, name="x") == tmp_path
    assert common.output_folder(tmp_path, quick=False, name="x") == tmp_path


def test_a_full_run_writes_to_the_committed_results():
    assert common.output_folder(None, quick=False, name="x") == common.RESULTS_DIR
    assert common.RESULTS_DIR == common.BENCHMARK_DIR / "results"


def test_a_quick_run_writes_to_a_new_temporary_folder_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    first = common.output_folder(None, quick=True, name="sync_bn")
    second = common.output_folder(None, quick=True, name="sync_bn")
    assert first.parent == second.parent == tmp_path and first != second
    assert first.is_dir() and not list(first.iterdir())
    assert first.name.startswith("sync_bn_quick_")
    assert f"Quick run: results go to {first} (" in capsys.readouterr().out


def test_a_command_is_recorded_as_the_module_a_user_runs():
    assert common.command_line("benchmark.sync_bn") == "python -m benchmark.sync_bn"
    assert (
        common.command_line("benchmark.sync_bn", ["--sections", "resnet"])
        == "python -m benchmark.sync_bn --sections resnet"
    )
