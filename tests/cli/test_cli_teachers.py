"""`tfsim pretrain --algorithm dino`: a momentum teacher from the command line."""

from __future__ import annotations

import json
import math

import keras
import numpy as np
import pytest

from tensorflow_similarity.cli.pretrain import PretrainJob
from tests.cli.test_cli import QUICK, history, tfsim
from tests.cli.test_cli_lars import resolved


@pytest.mark.slow
def test_dino_run_trains_its_teacher_and_saves_it(tmp_path):
    output = tmp_path / "dino"
    options = [*QUICK[:-1], "1"]  # One epoch of the quick run.
    result = tfsim(
        "pretrain", "--algorithm", "dino", *options, "--output", str(output), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (epoch,) = history(output)["epochs"]
    # The collapse monitor of DINO: the teacher's entropy over its prototypes, in [0, log K].
    assert 0 < epoch["teacher_entropy"] <= math.log(32) + 1e-6
    summary = json.loads((output / "summary.json").read_text())
    assert 0 <= summary["knn_accuracy_after"] <= 1
    model = keras.saving.load_model(output / "model.keras")
    assert model.algorithm == "dino"
    total, per_epoch = model.schedule_steps.numpy().tolist()
    assert total == per_epoch > 0  # One epoch: the schedule spans the run's steps.
    teacher = model.teacher_backbone.get_weights()
    student = model.backbone.get_weights()
    assert any(not np.array_equal(t, s) for t, s in zip(teacher, student, strict=True))
    assert np.any(model.dino_center.numpy() != 0)


def test_pretrain_passes_the_methods_run_options_for_the_runs_epochs():
    argv = ["pretrain", "--algorithm", "dino", "--epochs", "10", "--projector-dim", "8"]
    model = PretrainJob(resolved([*argv, "--image-size", "8"]), None, None).build(1)
    # DINO's teacher temperature warms up over a third of the run (`DINO.run_options`).
    assert model.algorithm_options["warmup_teacher_temperature_epochs"] == 3


@pytest.mark.parametrize("algorithm, ratio", [("simsiam", 0.25), ("byol", 16), ("mocov3", 16)])
def test_pretrain_builds_the_predictor_the_method_declares(algorithm, ratio):
    argv = ["pretrain", "--algorithm", algorithm, "--projector-dim", "8", "--image-size", "8"]
    model = PretrainJob(resolved(argv), None, None).build(steps_per_epoch=1)
    hidden = [
        layer.units for layer in model.predictor.layers if isinstance(layer, keras.layers.Dense)
    ]
    assert hidden == [int(8 * ratio), 8]
