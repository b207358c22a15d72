"""`cli.run_folder`: one run per `--output` folder, and the runs that stop on their own.

The folder rules are checked on folders laid out as a run leaves them; the
runs that diverge or warn are quick self-supervised `main([...])` runs on one
device in this process (conftest's 8 logical CPUs already exist), as in
`tests/cli/test_cli_supervised.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.cli import main, run_folder
from tensorflow_similarity.cli.errors import EXIT_DIVERGED, TrainingDiverged, UsageError

# A self-supervised run as small as the job allows: 120 digits, batches of 16, one device.
TINY = [
    "--data",
    "digits",
    "--strategy",
    "one-device",
    "--no-deterministic",
    "--limit",
    "120",
    "--batch-size",
    "16",
    "--projector-dim",
    "16",
    "--epochs",
    "2",
]


class InterruptAtTrainBegin(keras.callbacks.Callback):
    """Ctrl-C once `fit` starts: the run was set up (run.json written), no step was made."""

    def __init__(self) -> None:
        super().__init__()
        self.started = 0

    def on_train_begin(self, logs=None):
        self.started += 1
        raise KeyboardInterrupt


def lay_out(output: Path, state: str) -> Path:
    """Writes the files a run in `state` leaves (contents are stand-ins)."""
    output.mkdir(parents=True, exist_ok=True)
    run = {"options": {"algorithm": "multisimilarity", "image_size": 8}}
    (output / "run.json").write_text(json.dumps(run))
    if state == "no epoch":
        return output
    if state == "unrecorded":  # what an earlier tfsim left, finished or mixed with another run
        (output / "model.keras").write_bytes(b"model")
        return output
    (output / "history.json").write_text('{"epochs": [{"epoch": 1}]}')
    (output / "logs" / "train").mkdir(parents=True)
    (output / "logs" / "train" / "events.out.tfevents.1").write_bytes(b"event")
    if state == "interrupted":
        (output / "backup").mkdir()
        (output / "backup" / "latest.weights.h5").write_bytes(b"weights")
    elif state == "diverged":
        run["diverged"] = "the loss became nan at epoch 2, step 3 of 6"
        (output / "run.json").write_text(json.dumps(run))
    elif state == "finished":
        (output / "model.keras").write_bytes(b"model")
        (output / "model.index").mkdir()
        (output / "model.index" / "index_metadata.json").write_text("{}")
        for plot in ("loss.png", "retrieval.png", "neighbours.png", "embeddings.png"):
            (output / plot).write_bytes(b"png")
        (output / "summary.json").write_text("{}")
        run_folder.finish(output)
    return output


def test_a_new_run_may_start_in_a_new_an_empty_or_an_unrelated_folder(tmp_path):
    run_folder.check_new_run(tmp_path / "new", resume=False, overwrite=False)
    (tmp_path / "empty").mkdir()
    run_folder.check_new_run(tmp_path / "empty", resume=False, overwrite=False)
    unrelated = tmp_path / "unrelated"
    (unrelated / "worker-1").mkdir(parents=True)  # a worker's folder, made before run.json
    (unrelated / "notes.txt").write_text("mine")
    (unrelated / "worker-1.log").write_text("examples/multi_worker.py's log")
    run_folder.check_new_run(unrelated, resume=False, overwrite=False)


@pytest.mark.parametrize(
    "state, words, resumable",
    [
        ("finished", "that finished (model.keras written)", False),
        ("interrupted", "that was interrupted", True),
        ("no epoch", "that stopped before completing an epoch", True),
        ("diverged", "that diverged (the loss became nan at epoch 2", False),
        ("unrecorded", "that left a model.keras that its run.json does not record", False),
    ],
)
def test_a_folder_holding_a_run_is_refused_unless_overwrite(tmp_path, state, words, resumable):
    output = lay_out(tmp_path / "out", state)
    with pytest.raises(UsageError) as refused:
        run_folder.check_new_run(output, resume=False, overwrite=False)
    message = str(refused.value)
    assert f"--output {str(output)!r} holds a run (" in message and words in message
    assert "Give another --output" in message and "--overwrite" in message
    assert ("--resume" in message) == resumable
    run_folder.check_new_run(output, resume=False, overwrite=True)
    # Another worker of a cluster leaves the folder to the chief.
    run_folder.check_new_run(output, resume=False, overwrite=False, chief=False)


def test_a_runs_file_names_without_run_json_are_refused_even_with_overwrite(tmp_path):
    (tmp_path / "model.keras").write_bytes(b"somebody's model")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "app.log").write_text("somebody's log")
    for overwrite in (False, True):
        with pytest.raises(UsageError, match=r"holds model.keras, logs/ but no run.json"):
            run_folder.check_new_run(tmp_path, resume=False, overwrite=overwrite)


def test_resume_and_overwrite_together_are_refused(tmp_path):
    output = lay_out(tmp_path / "out", "interrupted")
    with pytest.raises(UsageError, match="give one of the two"):
        run_folder.check_new_run(output, resume=True, overwrite=True)
    run_folder.check_new_run(output, resume=True, overwrite=False)


def test_clear_deletes_the_runs_files_only_model_first_and_run_json_last(tmp_path, monkeypatch):
    output = lay_out(tmp_path / "out", "finished")
    (output / "backup").mkdir()
    (output / "worker-1" / "logs").mkdir(parents=True)
    (output / "worker-1" / "logs" / "events").write_bytes(b"event")
    (output / "history.json.tmp").write_text("{")
    (output / "notes.txt").write_text("mine")
    (output / "worker-1.log").write_text("a log beside the run")
    deleted = []
    rmtree, unlink = run_folder.shutil.rmtree, Path.unlink
    monkeypatch.setattr(
        run_folder.shutil, "rmtree", lambda path: (deleted.append(path.name), rmtree(path))
    )
    monkeypatch.setattr(
        Path, "unlink", lambda path, **kw: (deleted.append(path.name), unlink(path, **kw))
    )
    run_folder.clear(output)
    assert deleted[0] == "model.keras" and deleted[-1] == "run.json"
    assert set(deleted) >= {"model.index", "logs", "worker-1", "history.json.tmp", "loss.png"}
    assert "backup" not in deleted  # an empty folder is nobody's: left alone
    assert sorted(p.name for p in output.iterdir()) == ["backup", "notes.txt", "worker-1.log"]


@pytest.mark.parametrize(
    "state, message",
    [
        ("none", "no run was started there (no run.json). Run without --resume"),
        ("finished", "its run finished (model.keras written). Start a new run with --overwrite"),
        ("diverged", "Resuming would repeat it: start again with a lower --learning-rate"),
        ("unrecorded", "left a model.keras that its run.json does not record (a run of an"),
    ],
)
def test_resume_refuses_what_it_cannot_continue_and_says_why(tmp_path, state, message):
    output = tmp_path / "out"
    if state == "none":
        output.mkdir()
    else:
        lay_out(output, state)
    with pytest.raises(UsageError) as refused:
        run_folder.check_resumable(output)
    assert str(refused.value).startswith(f"nothing to resume in {str(output)!r}: ")
    assert message in str(refused.value)


def test_resume_continues_an_interrupted_run_or_restarts_one_that_completed_no_epoch(tmp_path):
    run_folder.check_resumable(lay_out(tmp_path / "interrupted", "interrupted"))
    run_folder.check_resumable(lay_out(tmp_path / "no_epoch", "no epoch"))
    # A run killed after it wrote run.json and model.keras, but before it recorded them,
    # still has its backup: resumable, not finished.
    killed = lay_out(tmp_path / "killed", "interrupted")
    (killed / "model.keras").write_bytes(b"model")
    assert run_folder.describe(killed)[0] == "interrupted"


def test_a_finished_runs_model_and_index_must_be_the_ones_it_recorded(tmp_path):
    output = lay_out(tmp_path / "out", "finished")
    run = json.loads((output / "run.json").read_text())
    assert set(run["finished"]["sha256"]) == {"model.keras", "model.index/index_metadata.json"}
    run_folder.check_model_belongs(output, run, "RETRAIN")
    (output / "model.keras").write_bytes(b"another run's model")
    with pytest.raises(UsageError, match=r"model.keras is not what its run wrote.*RETRAIN"):
        run_folder.check_model_belongs(output, run, "RETRAIN")
    (output / "model.keras").write_bytes(b"model")
    (output / "model.index" / "extra.npz").write_bytes(b"another run's index file")
    with pytest.raises(UsageError, match=r"model.index/ is not what its run wrote"):
        run_folder.check_model_belongs(output, run, "RETRAIN")
    del run["finished"]
    (output / "run.json").write_text(json.dumps(run))
    with pytest.raises(UsageError, match=r"does not record which model.keras.*earlier tfsim"):
        run_folder.check_model_belongs(output, run, "RETRAIN")
    (output / "backup").mkdir()
    (output / "backup" / "latest.weights.h5").write_bytes(b"weights")
    with pytest.raises(
        UsageError, match=r"interrupted while writing them\); finish it with: .*--resume"
    ):
        run_folder.check_model_belongs(output, run, "RETRAIN")


@pytest.mark.parametrize("epochs, expected", [(2, "after 2 completed epochs"), (0, "before")])
def test_the_interruption_message_suggests_what_works(tmp_path, capsys, epochs, expected):
    run_folder.print_interrupted(tmp_path, epochs)
    message = capsys.readouterr().err
    assert f"tfsim: interrupted {expected}" in message
    assert message.rstrip().endswith(f"tfsim train --output {tmp_path} --resume")
    if not epochs:
        assert "Start it again from its first epoch" in message


def test_divergence_is_reported_and_recorded(tmp_path, capsys):
    output = lay_out(tmp_path / "out", "interrupted")
    error = TrainingDiverged("the loss became nan", 3, 5, 7, 1e6, 2)
    assert run_folder.report_divergence(output, error) == EXIT_DIVERGED == 3
    message = capsys.readouterr().err
    assert message.startswith("tfsim: error: training diverged: the loss became nan at epoch 3, ")
    assert "step 5 of 7" in message and "--learning-rate 1e+06" in message
    assert "--learning-rate 100000" in message and "backup/ keeps epoch 2" in message
    assert json.loads((output / "run.json").read_text())["diverged"] == str(error)
    with pytest.raises(UsageError, match="its run diverged"):
        run_folder.check_resumable(output)


def test_a_diverging_run_stops_at_its_first_non_finite_loss(tmp_path, capsys):
    output = tmp_path / "out"
    status = main(["train", *TINY, "--learning-rate", "1e6", "--output", str(output)])
    error = capsys.readouterr().err
    assert status == EXIT_DIVERGED, error
    assert "tfsim: error: training diverged: the loss became nan at epoch 1, step " in error
    assert "Traceback" not in error
    assert not (output / "model.keras").exists()
    assert "diverged" in json.loads((output / "run.json").read_text())
    assert main(["train", "--output", str(output), "--resume"]) == 2
    assert "its run diverged (the loss became nan at epoch 1" in capsys.readouterr().err


def write_images(folder: Path, count: int) -> None:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        pixels = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
        (folder / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())


def test_a_self_supervised_run_on_one_class_warns_that_knn_accuracy_means_nothing(tmp_path, capsys):
    write_images(tmp_path / "data" / "cats", 10)
    args = ["--data", str(tmp_path / "data"), "--image-size", "8", "--batch-size", "4"]
    status = main(
        ["train", *TINY[2:5], *args, "--projector-dim", "16", "--output", str(tmp_path / "out")],
        callbacks=[InterruptAtTrainBegin()],
    )
    error = capsys.readouterr().err
    assert status == 130, error
    assert "tfsim: warning: the training images of" in error
    assert "are all of one class (cats)" in error and "reads 1.000" in error
    assert error.index("tfsim: warning") < error.index("tfsim: interrupted")


def test_overwrite_removes_a_symlinked_entry_itself_never_what_it_points_to(tmp_path):
    output = lay_out(tmp_path / "out", "finished")
    kept = tmp_path / "kept-logs"
    (output / "logs").rename(kept)
    (output / "logs").symlink_to(kept, target_is_directory=True)
    (tmp_path / "kept.png").write_bytes(b"png")
    (output / "loss.png").unlink()
    (output / "loss.png").symlink_to(tmp_path / "kept.png")
    run_folder.clear(output)
    assert not (output / "logs").exists() and not (output / "logs").is_symlink()
    assert not (output / "loss.png").is_symlink()
    assert (kept / "train" / "events.out.tfevents.1").is_file()
    assert (tmp_path / "kept.png").is_file()


def test_an_output_inside_the_data_folder_is_refused_naming_both(tmp_path, capsys):
    write_images(tmp_path / "data" / "cats", 4)
    data = tmp_path / "data"
    (tmp_path / "link").symlink_to(data, target_is_directory=True)
    for output in (data, data / "run", tmp_path / "link" / "run"):
        with pytest.raises(UsageError, match=r"is inside --data .*Give an --output outside"):
            run_folder.check_outside_data(output, data)
    run_folder.check_outside_data(tmp_path / "run", data)
    run_folder.check_outside_data(tmp_path / "data-runs", data)
    status = main(["train", "--data", str(data), "--output", str(tmp_path / "link" / "run")])
    error = capsys.readouterr().err
    assert status == 2 and "tfsim: error: --output" in error
    assert str(data.resolve() / "run") in error and str(data) in error
    assert not (data / "run").exists()  # refused before the folder was made


def resume_args(output: Path, *options: str):
    from tensorflow_similarity.cli.options import resumed_options
    from tensorflow_similarity.cli.parser import build_parser

    argv = ["train", "--output", str(output), "--resume", *options]
    args = build_parser().parse_args(argv)
    explicit = vars(build_parser(suppress_defaults=True).parse_args(argv))
    return resumed_options(args, explicit, output)


def default_run(output: Path, deterministic: bool = True) -> Path:
    lay_out(output, "no epoch")
    options = {
        "algorithm": "simclr",
        "replicas": None,
        "strategy": "mirrored",
        "sync_bn": True,
        "sync_group_size": None,
        "batch_size": 128,
    }
    run = {"options": options, "deterministic": deterministic, "devices": {"replicas": 2}}
    (output / "run.json").write_text(json.dumps(run))
    return output


def test_resume_compares_an_option_left_at_its_default_with_what_it_resolved_to(tmp_path):
    output = default_run(tmp_path / "out")
    args = resume_args(output, "--replicas", "2", "--sync-group-size", "2", "--batch-size", "128")
    assert args.replicas is None  # resolved again, to the same devices
    with pytest.raises(UsageError, match="--replicas 4 differs from the interrupted run's 2"):
        resume_args(output, "--replicas", "4")


@pytest.mark.parametrize("deterministic", [True, False])
def test_resume_refuses_the_other_deterministic_and_keeps_the_runs(tmp_path, deterministic):
    output = default_run(tmp_path / "out", deterministic)
    other = "--no-deterministic" if deterministic else "--deterministic"
    same = "--deterministic" if deterministic else "--no-deterministic"
    with pytest.raises(UsageError, match=f"{other} differs from the interrupted run's {same}"):
        resume_args(output, other)
    assert resume_args(output, same).deterministic is deterministic
    assert resume_args(output).deterministic is deterministic
    assert json.loads((output / "run.json").read_text())["deterministic"] is deterministic


def test_resume_refuses_other_replicas_than_the_run_trained_on(tmp_path):
    output = default_run(tmp_path / "out")
    run_folder.check_same_replicas(output, 2)
    with pytest.raises(UsageError, match="trained on 2 replicas, and would resume on 1"):
        run_folder.check_same_replicas(output, 1)


def test_a_batch_the_replicas_do_not_divide_is_refused_with_the_nearest_sizes(tmp_path, capsys):
    from tensorflow_similarity.cli.devices import check_batch_divides

    check_batch_divides(12, 4)
    with pytest.raises(UsageError, match=r"--batch-size 14 does not divide evenly over the 4 "):
        check_batch_divides(14, 4)
    with pytest.raises(UsageError, match=r"Use --batch-size 12 or 16, or --replicas a divisor"):
        check_batch_divides(14, 4)
    output = tmp_path / "out"
    argv = ["train", *TINY[:2], "--batch-size", "15", "--replicas", "2", "--output", str(output)]
    assert main(argv) == 2
    assert "--batch-size 15 does not divide evenly over the 2 replicas" in capsys.readouterr().err
    assert not (output / "run.json").exists()


def test_resume_refuses_data_that_changed_since_the_run_started(tmp_path, capsys, monkeypatch):
    from tensorflow_similarity.cli import command

    data = tmp_path / "data"
    write_images(data / "cats", 6)
    write_images(data / "dogs", 6)
    output = tmp_path / "out"
    argv = ["train", *TINY[2:5], "--data", str(data), "--image-size", "8", "--batch-size", "4"]
    argv += ["--projector-dim", "16", "--output", str(output)]
    assert main(argv, callbacks=[InterruptAtTrainBegin()]) == 130
    capsys.readouterr()
    recorded = json.loads((output / "run.json").read_text())["data"]
    assert sorted(recorded["files"])[:2] == ["cats/0.png", "cats/1.png"]
    assert not (output / ".tfsim.lock").exists()

    def no_work(*args, **kwargs):
        raise AssertionError("loaded data for a refused resume")

    monkeypatch.setattr(command, "load_data", no_work)
    resume = ["train", "--output", str(output), "--resume"]
    (data / "dogs" / "2.png").write_bytes((data / "cats" / "3.png").read_bytes())
    assert main(resume) == 2
    assert "changed since the interrupted run started: 1 file changed (dogs/2.png)" in (
        capsys.readouterr().err
    )
    write_images(data / "birds", 1)
    assert main(resume) == 2
    assert "1 file added (birds/0.png); 1 file changed (dogs/2.png)" in capsys.readouterr().err
    assert not (output / ".tfsim.lock").exists()
