"""`tfsim pretrain`'s linear-probe figures: when there is one, what it equals, how it is shown."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.cli import pretrain_report
from tensorflow_similarity.cli.fitting import pixel_vectors
from tensorflow_similarity.cli.pretrain import linear_probe_accuracy
from tensorflow_similarity.datasets import ImageData
from tensorflow_similarity.evaluators import linear_probe_on_features


def image_data(train_labels: list[int], test_labels: list[int]) -> ImageData:
    rng = np.random.default_rng(0)
    classes = max(train_labels + test_labels) + 1

    def images(labels: list[int]) -> np.ndarray:
        # Each class a brighter square on noise: separable by a linear classifier.
        pixels = rng.uniform(0, 0.2, size=(len(labels), 4, 4, 3)).astype(np.float32)
        for row, label in enumerate(labels):
            pixels[row, label % 4, label // 4] += 0.8
        return pixels

    return ImageData(
        x_train=images(train_labels),
        y_train=np.asarray(train_labels, np.int32),
        x_test=images(test_labels),
        y_test=np.asarray(test_labels, np.int32),
        class_names=[f"c{i}" for i in range(classes)],
        source="test",
    )


def test_the_probe_is_the_evaluators_protocol_on_the_run_splits():
    data = image_data([i % 3 for i in range(30)], [i % 3 for i in range(12)])
    expected = linear_probe_on_features(
        pixel_vectors(data.x_train),
        data.y_train,
        pixel_vectors(data.x_test),
        data.y_test,
        top_k=1,
        epochs=100,
        learning_rates=(0.003, 0.01, 0.03, 0.1, 0.3),
        validation_fraction=0.2,
    )
    accuracy = linear_probe_accuracy(pixel_vectors, data)
    assert accuracy == expected.top1_accuracy == 1.0


@pytest.mark.parametrize(
    "train_labels",
    [
        [0] * 10,  # one class: nothing to classify
        [0, 0, 0, 0, 1, 1, 1, 1],  # no class of 5 images: nothing held out
    ],
)
def test_data_that_cannot_hold_a_probe_has_no_figure(train_labels):
    data = image_data(train_labels, [0, 1] if max(train_labels) else [0, 0])
    assert linear_probe_accuracy(pixel_vectors, data) is None


def figures(**linear: float | None) -> dict:
    records = [{"knn_accuracy": 0.8, "knn_accuracy_augmented": 0.6}]
    before = {
        "knn_accuracy_before": 0.7,
        "knn_accuracy_augmented_before": 0.5,
        "linear_accuracy_before": linear.pop("before", 0.75),
    }
    summary = pretrain_report.summary(records, before, 0.65, **linear)
    return {
        **summary,
        "images_per_second": 10.0,
        "seconds_per_epoch": 1.0,
        "epochs": 1,
        "replicas": 2,
        "strategy": "mirrored",
        "batch_norm": "synchronised",
    }


def test_the_summary_holds_the_linear_figures_beside_the_knn_ones():
    summary = figures(linear_after=0.9, linear_pixels=0.85)
    assert summary["linear_accuracy_before"] == 0.75
    assert summary["linear_accuracy_after"] == 0.9
    assert summary["linear_accuracy_pixels"] == 0.85
    assert summary["linear_probe"] == pretrain_report.LINEAR_PROBE_PROTOCOL
    table = pretrain_report.table(summary)
    for row in [
        "| linear-probe accuracy before training   | 0.750",
        "| linear-probe accuracy after training    | 0.900",
        "| linear-probe accuracy of the raw pixels | 0.850",
    ]:
        assert row in table
    lines = table.splitlines()
    assert lines.index(next(line for line in lines if "kNN accuracy of the raw" in line)) + 1 == (
        lines.index(next(line for line in lines if "linear-probe accuracy before" in line))
    )


def test_a_missing_linear_figure_is_null_and_printed_n_a():
    summary = figures(before=None)
    assert summary["linear_accuracy_before"] is None
    assert summary["linear_accuracy_after"] is None
    table = pretrain_report.table(summary)
    assert "| linear-probe accuracy after training    | n/a" in table
    assert pretrain_report.accuracy_text(None) == "n/a"
    assert pretrain_report.accuracy_text(0.5) == "0.500"
