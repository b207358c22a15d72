"""The `tfsim` command, driven as a subprocess, and the data loading behind it.

The command configures its own logical CPU devices, which must happen before
TensorFlow starts, so it always runs in a fresh process here (this process
already has the 8 devices of conftest).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfsim as tfsim_launcher
from tensorflow_similarity.augmenters import simsiam_augmenter
from tensorflow_similarity.cli import pretrain_report, run_folder
from tensorflow_similarity.datasets import load_data
from tensorflow_similarity.evaluators import linear_probe_on_features

# Tiny but complete runs: the real digits, 240 of them, 8x8, 2 replicas, sync BN, a
# quarter-width ResNet-18.
QUICK = [
    "--data",
    "digits",
    "--width",
    "0.25",
    "--limit",
    "240",
    "--batch-size",
    "32",
    "--projector-dim",
    "32",
    "--epochs",
    "2",
]
# What TensorFlow's C++ libraries print: glog-style lines, absl's pre-initialisation notice,
# and the messages seen in tfsim runs.
CPP_LOG = re.compile(
    r"^[IWEF]\d{4} [\d:.]+ +\d+ \S+:\d+\]|absl::InitializeLog|op_level_cost_estimator|"
    r"PredictCost|oneDNN custom operations|cpu_feature_guard",
    re.MULTILINE,
)
# `main` with a callback that presses Ctrl-C at the end of epoch N (sys.argv[1]), as a
# Python caller injects one; the other arguments are the command's.
INTERRUPTING_DRIVER = """
import os, signal, sys, time
import keras
from tensorflow_similarity.cli import main

class CtrlC(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == int(sys.argv[1]):
            # A process started in the background by a non-interactive shell inherits SIGINT
            # ignored; restore Python's handler so that the signal is not dropped.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler raises KeyboardInterrupt at the next bytecode

sys.exit(main(sys.argv[2:], callbacks=[CtrlC()]))
"""


def tfsim_command(*args: str, log_level: str | None = "2") -> tuple[list[str], dict[str, str]]:
    """The `python -m tfsim` command line (what the `tfsim` script runs) and its environment.

    `log_level`: TF_CPP_MIN_LOG_LEVEL, or `None` to leave it unset as a new user would.
    """
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    if log_level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = log_level
    return [sys.executable, "-m", "tfsim", *args], env


def tfsim(
    *args: str, cwd: Path, timeout: float = 300, log_level: str | None = "2"
) -> subprocess.CompletedProcess:
    command, env = tfsim_command(*args, log_level=log_level)
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def weights(path: Path) -> dict[str, np.ndarray]:
    return {v.path: v.numpy() for v in keras.saving.load_model(path).weights}


def assert_same_weights(first: dict[str, np.ndarray], second: dict[str, np.ndarray]) -> None:
    assert list(first) == list(second)
    for path, value in first.items():
        np.testing.assert_array_equal(value, second[path], err_msg=path)


def history(output: Path) -> dict:
    return json.loads((output / "history.json").read_text())


def write_png(path: Path, seed: int = 0) -> None:
    pixels = np.random.default_rng(seed).integers(0, 256, size=(12, 10, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tf.io.encode_png(pixels).numpy())


def test_console_script_is_declared():
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts.get("tfsim") == "tfsim:main"


@pytest.mark.parametrize(
    "command, algorithm_default",
    [
        ("train", "simclr on glyphs, else simsiam"),
        ("pretrain", "simclr on glyphs, else simsiam"),
        ("train-metric", "Default: multisimilarity"),
    ],
)
def test_help_documents_every_option_with_its_default(tmp_path, command, algorithm_default):
    result = tfsim(command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    for option in [
        "--algorithm",
        "--backbone",
        "--sync-bn",
        "--no-sync-bn",
        "--sync-group-size",
        "--replicas",
        "--strategy",
        "--data",
        "--image-size",
        "--epochs",
        "--batch-size",
        "--learning-rate",
        "--seed",
        "--output",
        "--resume",
        "--overwrite",
        "--limit",
        "--verbose",
        "--deterministic",
        "--no-deterministic",
    ]:
        assert option in text
    for default in [algorithm_default, "(default: resnet18)", "(default: glyphs)"]:
        assert default in text
    assert "--interrupt-after-epoch" not in text


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    (tmp_path / "empty" / "cats").mkdir(parents=True)
    write_png(tmp_path / "broken" / "cats" / "good.png")
    (tmp_path / "broken" / "dogs").mkdir(parents=True)
    (tmp_path / "broken" / "dogs" / "bad.png").write_bytes(b"not an image at all")
    (tmp_path / "a_file").write_text("x")
    return {
        "algorithm": (["--algorithm", "nnclr"], "invalid choice: 'nnclr'"),
        "backbone": (["--backbone", "vgg"], "invalid choice: 'vgg'"),
        "missing folder": (["--data", str(tmp_path / "nowhere")], "does not exist"),
        "empty folder": (["--data", str(tmp_path / "empty")], "holds no images"),
        "unreadable image": (["--data", str(tmp_path / "broken")], "bad.png"),
        "batch below replicas": (
            ["--batch-size", "1", "--replicas", "2"],
            "--batch-size 1 is smaller than the 2 replicas",
        ),
        "group size": (
            ["--replicas", "4", "--sync-group-size", "3"],
            "--sync-group-size 3 does not divide the 4 replicas",
        ),
        "unwritable output": (
            ["--output", str(tmp_path / "a_file" / "run")],
            "cannot write to --output",
        ),
        "output is a file": (["--output", str(tmp_path / "a_file")], "is a file"),
        "nothing to resume": (["--resume", "--output", str(tmp_path / "new")], "nothing to resume"),
        "image too small": (["--image-size", "4"], "at least 8"),
    }


BAD_INPUTS = [
    "algorithm",
    "backbone",
    "missing folder",
    "empty folder",
    "unreadable image",
    "batch below replicas",
    "group size",
    "unwritable output",
    "output is a file",
    "nothing to resume",
    "image too small",
]


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_is_a_clear_error_before_training(tmp_path, case):
    args, message = _bad_inputs(tmp_path)[case]
    output = ["--output", str(tmp_path / "out")] if "--output" not in args else []
    result = tfsim("train", *args, *output, cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "tfsim: error:" in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "Epoch 1" not in result.stdout
    assert not (tmp_path / "out" / "run.json").exists()


def test_tensorflow_log_is_hidden_unless_asked_for(tmp_path):
    # TensorFlow prints its start-up lines while it is imported, which `--help` does too.
    quiet = tfsim("train", "--help", cwd=tmp_path, log_level=None)
    assert quiet.returncode == 0, quiet.stderr
    assert not CPP_LOG.search(quiet.stderr), quiet.stderr
    # A level the user chose is theirs: at 0 TensorFlow prints what it prints at start-up.
    chosen = tfsim("train", "--help", cwd=tmp_path, log_level="0")
    tensorflow_lines = [m.group(0) for m in re.finditer(r"\S+\.cc:\d+\]", chosen.stderr)]
    if not tensorflow_lines:
        pytest.skip("this TensorFlow build prints no C++ log line at start-up")
    verbose = tfsim("train", "--help", "--verbose", cwd=tmp_path, log_level=None)
    assert verbose.returncode == 0, verbose.stderr
    assert [m.group(0) for m in re.finditer(r"\S+\.cc:\d+\]", verbose.stderr)] == (tensorflow_lines)


def test_verbose_and_its_prefixes_ask_for_the_log():
    assert tfsim_launcher.wants_log(["train", "--verbose"])
    assert tfsim_launcher.wants_log(["train", "--verb"])  # argparse accepts the prefix too
    assert not tfsim_launcher.wants_log(["train", "--", "--output", "verbose"])


def test_importing_the_library_leaves_the_process_alone():
    # Even in a process named like the command: only the tfsim entry point quiets the log.
    script = (
        "import os, sys; sys.argv[0] = '/venv/bin/tfsim'; saved = os.fstat(2).st_ino; "
        "import tensorflow_similarity; "
        "print(os.environ.get('TF_CPP_MIN_LOG_LEVEL'), os.fstat(2).st_ino == saved)"
    )
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    result = subprocess.run(
        [sys.executable, "-c", script, "train"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "True"]


def test_python_m_tensorflow_similarity_is_the_same_command(tmp_path):
    command, env = tfsim_command("train", "--help")
    package = subprocess.run(
        [sys.executable, "-m", "tensorflow_similarity", *command[3:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    launcher = tfsim("train", "--help", cwd=tmp_path)
    assert package.returncode == launcher.returncode == 0, package.stderr + launcher.stderr
    assert package.stdout == launcher.stdout


@pytest.fixture(scope="module")
def uninterrupted_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("uninterrupted")
    # As a new user runs it: TF_CPP_MIN_LOG_LEVEL unset.
    result = tfsim("train", *QUICK, "--output", str(root / "out"), cwd=root, log_level=None)
    return root / "out", result


@pytest.mark.slow
def test_default_run_shows_no_tensorflow_log(uninterrupted_run):
    _, result = uninterrupted_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert not CPP_LOG.search(result.stderr), result.stderr
    assert not CPP_LOG.search(result.stdout)


@pytest.mark.slow
def test_seeded_run_is_reproducible(tmp_path, uninterrupted_run):
    reference, _ = uninterrupted_run
    again = tfsim("train", *QUICK, "--output", str(tmp_path / "out"), cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    losses = [r["loss"] for r in history(tmp_path / "out")["epochs"]]
    assert losses == [r["loss"] for r in history(reference)["epochs"]]
    assert_same_weights(
        weights(tmp_path / "out" / "model.keras"), weights(reference / "model.keras")
    )


@pytest.mark.slow
def test_default_run_writes_model_history_logs_and_plots(uninterrupted_run):
    output, result = uninterrupted_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    for row in [
        "kNN accuracy before training",
        "kNN accuracy after training",
        "images per second",
        "seconds per epoch",
        "replicas",
        "synchronised over all 2 replicas",
    ]:
        assert row in result.stdout
    assert "knn_accuracy:" in result.stdout  # on the per-epoch progress line

    recorded = history(output)
    assert [r["epoch"] for r in recorded["epochs"]] == [1, 2]
    for record in recorded["epochs"]:
        assert np.isfinite(record["loss"])
        assert 0.0 <= record["knn_accuracy"] <= 1.0
        assert 0.0 < record["proj_std"] < 1.0
        assert record["images_per_second"] > 0
    # Random 8x8 digits features are far above the 10% of chance.
    assert recorded["knn_accuracy_before"] > 0.5
    summary = json.loads((output / "summary.json").read_text())
    assert summary["replicas"] == 2 and summary["sync_bn"] is True
    assert summary["knn_accuracy_after"] == recorded["epochs"][-1]["knn_accuracy"]
    assert json.loads((output / "run.json").read_text())["options"]["width"] == 0.25

    for plot in ["loss.png", "knn_accuracy.png", "neighbours.png", "embeddings.png"]:
        assert (output / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = list((output / "logs" / "train").glob("events.out.tfevents.*"))
    assert len(events) == 1
    tags = {
        value.tag
        for event in tf.compat.v1.train.summary_iterator(str(events[0]))
        for value in event.summary.value
    }
    assert {"epoch_loss", "epoch_knn_accuracy", "epoch_knn_accuracy_augmented"} <= tags
    assert "epoch_proj_std" in tags
    assert not (output / "backup").exists()  # removed once training finished
    # Every file is one `--overwrite` knows to delete.
    assert {p.name for p in output.iterdir()} <= set(run_folder.RUN_FILES)

    model = keras.saving.load_model(output / "model.keras")
    assert model.algorithm == "simsiam"
    # --width 0.25 reached the backbone: 16 filters in the stem, 128 features.
    assert model.backbone.get_layer("resnet18").get_layer("conv1_conv").filters == 16
    embeddings = model.embed(np.zeros((3, 8, 8, 3), np.float32))
    assert embeddings.shape == (3, 128)


def knn_accuracy_loops(
    memory: np.ndarray, memory_labels: np.ndarray, queries: np.ndarray, labels: np.ndarray, k: int
) -> float:
    """KNNAccuracy's vote in float64 loops: cosine, top k, weights exp(s / 0.07)."""
    memory = memory.astype(np.float64)
    memory /= np.linalg.norm(memory, axis=1, keepdims=True)
    correct = 0
    for query, label in zip(queries.astype(np.float64), labels, strict=True):
        query /= np.linalg.norm(query)
        similarity = [float(np.dot(query, row)) for row in memory]
        nearest = sorted(range(len(memory)), key=lambda i: -similarity[i])[:k]
        votes: dict[int, float] = {}
        for i in nearest:
            votes[int(memory_labels[i])] = votes.get(int(memory_labels[i]), 0.0) + np.exp(
                similarity[i] / 0.07
            )
        best = max(votes.values())
        correct += min(c for c, v in votes.items() if v == best) == label
    return correct / len(labels)


@pytest.mark.slow
def test_augmented_query_accuracy_is_recomputed_from_the_saved_model(uninterrupted_run):
    output, result = uninterrupted_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kNN accuracy, augmented queries, after" in result.stdout
    summary = json.loads((output / "summary.json").read_text())
    recorded = history(output)
    # The run's data and its own augmenter (SimSiam's, seeded by --seed 0), first view drawn
    # with step -1: the queries tfsim documents.
    data = load_data("digits", image_size=8, seed=0, limit=240)
    queries = simsiam_augmenter(8, seed=0)(tf.constant(data.x_test), step=-1)[0].numpy()
    assert not np.allclose(queries, data.x_test)
    backbone = keras.saving.load_model(output / "model.keras").backbone
    memory = backbone.predict(data.x_train, verbose=0)
    k = min(20, len(data.y_train))
    augmented = knn_accuracy_loops(
        memory, data.y_train, backbone.predict(queries, verbose=0), data.y_test, k
    )
    clean = knn_accuracy_loops(
        memory, data.y_train, backbone.predict(data.x_test, verbose=0), data.y_test, k
    )
    assert summary["knn_accuracy_augmented_after"] == augmented
    assert recorded["epochs"][-1]["knn_accuracy_augmented"] == augmented
    assert summary["knn_accuracy_after"] == clean
    before = recorded["knn_accuracy_augmented_before"]
    assert summary["knn_accuracy_augmented_before"] == before and 0.0 <= before <= 1.0
    assert [set(r) >= {"knn_accuracy", "knn_accuracy_augmented"} for r in recorded["epochs"]] == [
        True,
        True,
    ]


@pytest.mark.slow
def test_linear_probe_figures_are_printed_and_summarised_beside_the_knn_ones(uninterrupted_run):
    output, result = uninterrupted_run
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((output / "summary.json").read_text())
    recorded = history(output)
    first_line = next(line for line in result.stdout.splitlines() if line.startswith("tfsim: "))
    before = summary["linear_accuracy_before"]
    assert before == recorded["linear_accuracy_before"]
    assert f"linear-probe accuracy before training {before:.3f}" in first_line
    assert f"(raw pixels {summary['linear_accuracy_pixels']:.3f})" in first_line
    for key in ["before", "after", "pixels"]:
        value = summary[f"linear_accuracy_{key}"]
        assert 0.0 <= value <= 1.0
        assert re.search(
            rf"\| linear-probe accuracy {'of the raw' if key == 'pixels' else key}.*"
            rf"\| {value:.3f} +\|",
            result.stdout,
        ), key
    assert summary["linear_probe"] == pretrain_report.LINEAR_PROBE_PROTOCOL

    # The kNN accuracy's splits and features: the raw pixels, and the saved backbone's.
    data = load_data("digits", image_size=8, seed=0, limit=240)
    protocol = {**pretrain_report.LINEAR_PROBE_PROTOCOL, "top_k": 1}
    pixels = linear_probe_on_features(
        data.x_train.reshape(len(data.x_train), -1),
        data.y_train,
        data.x_test.reshape(len(data.x_test), -1),
        data.y_test,
        **protocol,
    )
    assert summary["linear_accuracy_pixels"] == pixels.top1_accuracy
    backbone = keras.saving.load_model(output / "model.keras").backbone
    after = linear_probe_on_features(
        backbone.predict(data.x_train, verbose=0),
        data.y_train,
        backbone.predict(data.x_test, verbose=0),
        data.y_test,
        **protocol,
    )
    # predict and the run's traced call may differ in the last bits: one test image at most.
    assert summary["linear_accuracy_after"] == pytest.approx(
        after.top1_accuracy, abs=1.01 / len(data.y_test)
    )


@pytest.mark.slow
def test_interrupt_then_resume_continues_with_weights_and_moving_statistics(
    tmp_path, uninterrupted_run
):
    reference, _ = uninterrupted_run
    output = tmp_path / "out"
    # A job scheduler preempting the run: SIGTERM once epoch 1 is backed up.
    # Started as `tfsim pretrain`, resumed below as `tfsim train` and `tfsim pretrain`: the
    # reference is `tfsim train`'s, so both spellings run the same job.
    command, env = tfsim_command("pretrain", *QUICK, "--output", str(output))
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while not (
        (output / "backup" / "latest.weights.h5").is_file()
        and (output / "history.json").is_file()
        and history(output)["epochs"]
    ):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "epoch 1 was not backed up in time"
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    first = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    assert first.returncode == 130, first.stdout + first.stderr
    assert "interrupted after 1 completed epoch" in first.stderr
    assert "--resume" in first.stderr
    assert "Traceback" not in first.stderr
    assert [r["epoch"] for r in history(output)["epochs"]] == [1]
    assert (output / "backup" / "latest.weights.h5").is_file()
    assert not (output / "model.keras").exists()

    # On resume the run's options come from run.json; a contradicting one is refused.
    clash = tfsim("train", "--output", str(output), "--resume", "--epochs", "5", cwd=tmp_path)
    assert clash.returncode == 2 and "--epochs 5 differs" in clash.stderr

    # Resumed, the run trains epoch 2 only; interrupted again after it, the backup holds the
    # weights at the end of training.
    command, env = tfsim_command()
    second = subprocess.run(
        [
            sys.executable,
            "-c",
            INTERRUPTING_DRIVER,
            "2",
            "train",
            "--output",
            str(output),
            "--resume",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode == 130, second.stdout + second.stderr
    assert "Epoch 2/2" in second.stdout and "Epoch 1/2" not in second.stdout
    backup = tmp_path / "backup.weights.h5"
    shutil.copy(output / "backup" / "latest.weights.h5", backup)

    # With every epoch done, resuming trains nothing: the saved model must hold exactly the
    # backed-up weights, moving batch-norm statistics included.
    third = tfsim("pretrain", "--output", str(output), "--resume", cwd=tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr
    resumed = history(output)
    assert [r["epoch"] for r in resumed["epochs"]] == [
        r["epoch"] for r in history(reference)["epochs"]
    ]
    assert resumed["knn_accuracy_before"] == history(reference)["knn_accuracy_before"]
    assert (
        resumed["knn_accuracy_augmented_before"]
        == history(reference)["knn_accuracy_augmented_before"]
    )
    assert resumed["linear_accuracy_before"] == history(reference)["linear_accuracy_before"]
    assert not (output / "backup").exists()

    model = keras.saving.load_model(output / "model.keras")
    saved = {v.path: v.numpy() for v in model.weights}
    moving = [p for p in saved if "moving_mean" in p]
    assert len(moving) >= 20  # ResNet-18's batch norms, then the heads'
    assert all(np.abs(saved[p]).max() > 0 for p in moving)  # trained, not the initial zeros
    model.load_weights(backup)
    restored = {v.path: v.numpy() for v in model.weights}
    for path, value in saved.items():
        np.testing.assert_array_equal(value, restored[path], err_msg=path)

    # Interrupted twice and resumed, the run ends exactly where the uninterrupted one did.
    assert [r["loss"] for r in resumed["epochs"]] == [
        r["loss"] for r in history(reference)["epochs"]
    ]
    assert_same_weights(saved, weights(reference / "model.keras"))


def test_load_data_digits_is_a_stratified_deterministic_split():
    data = load_data("digits", image_size=12, seed=3)
    assert data.x_train.shape == (1438, 12, 12, 3) and data.x_test.shape == (359, 12, 12, 3)
    assert data.x_train.dtype == np.float32
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    assert data.num_classes == 10
    per_class = np.bincount(data.y_test, minlength=10)
    assert per_class.min() >= 34 and per_class.max() <= 37  # ~20% of each class's ~180
    again = load_data("digits", image_size=12, seed=3)
    np.testing.assert_array_equal(data.y_test, again.y_test)
    np.testing.assert_array_equal(data.x_test, again.x_test)
    other = load_data("digits", image_size=12, seed=4)
    assert not np.array_equal(data.x_test, other.x_test)


def test_load_data_folder_reads_labels_from_sub_folders(tmp_path):
    for i in range(3):
        write_png(tmp_path / "cats" / f"{i}.png", seed=i)
        write_png(tmp_path / "dogs" / f"{i}.PNG", seed=10 + i)
    (tmp_path / "dogs" / "notes.txt").write_text("ignored")
    data = load_data(str(tmp_path), image_size=6, seed=0)
    assert data.class_names == ["cats", "dogs"]
    assert data.x_train.shape[1:] == (6, 6, 3)
    assert sorted(np.concatenate([data.y_train, data.y_test]).tolist()) == [0, 0, 0, 1, 1, 1]
    assert np.bincount(data.y_test).tolist() == [1, 1]
    # The pixels are the file's, resized: compare with TensorFlow's own decoding.
    first = tf.io.decode_png((tmp_path / "cats" / "0.png").read_bytes())
    expected = tf.image.resize(tf.cast(first, tf.float32) / 255.0, (6, 6), antialias=True)
    train_cats = data.x_train[data.y_train == 0]
    test_cats = data.x_test[data.y_test == 0]
    candidates = np.concatenate([train_cats, test_cats])
    assert min(np.abs(c - expected.numpy()).max() for c in candidates) < 1e-5


def test_load_data_limit_and_errors(tmp_path):
    small = load_data("digits", image_size=8, limit=50)
    assert len(small.y_train) + len(small.y_test) == 50
    assert 8 <= len(small.y_test) <= 12
    with pytest.raises(ValueError, match="does not exist"):
        load_data(str(tmp_path / "missing"))
    (tmp_path / "only" / "a").mkdir(parents=True)
    (tmp_path / "only" / "a" / "x.jpg").write_bytes(b"\xff\xd8 truncated")
    with pytest.raises(ValueError, match=r"x\.jpg"):
        load_data(str(tmp_path / "only"))
    with pytest.raises(ValueError, match="tfds:NAME needs a dataset name"):
        load_data("tfds:")
