"""The plots a `tfsim` run writes, drawn from tiny arrays (no training here).

That a real run writes them is test_cli's (pretrain) and test_cli_supervised's
(train-metric) quick runs.
"""

from __future__ import annotations

import matplotlib.colors
import numpy as np
import pytest

from tensorflow_similarity.cli import metric_report, pretrain_report, report

RED = matplotlib.colors.to_rgba("red")
GREEN = matplotlib.colors.to_rgba("green")
RECORDS = [
    {"epoch": 1, "loss": 2.0, "knn_accuracy": 0.4, "knn_accuracy_augmented": 0.3},
    {"epoch": 2, "loss": 1.5, "knn_accuracy": 0.5, "knn_accuracy_augmented": 0.35},
]


def _cosine_neighbours_loops(embeddings: np.ndarray, query: int, k: int) -> list[int]:
    """The k nearest other rows by cosine, float64 loops; ties keep the lower row."""
    rows = [[float(v) for v in row] for row in embeddings]
    norms = [sum(v * v for v in row) ** 0.5 for row in rows]
    distances = []
    for other, row in enumerate(rows):
        if other == query:
            continue
        dot = sum(a * b for a, b in zip(rows[query], row, strict=True))
        distances.append((1.0 - dot / (norms[query] * norms[other]), other))
    return [other for _, other in sorted(distances)[:k]]


def _frames(axes) -> list[list[str]]:
    """'red', 'green' or 'other' for each neighbour axis (column 1 on) of each row."""
    names = {RED: "red", GREEN: "green"}
    return [
        [names.get(tuple(ax.spines["top"].get_edgecolor()), "other") for ax in row[1:]]
        for row in axes
    ]


def test_knn_figure_draws_the_raw_pixels_line_at_the_tables_value():
    before = {"knn_accuracy_before": 0.2, "knn_accuracy_augmented_before": 0.1}
    summary = pretrain_report.summary(RECORDS, before, knn_pixels=0.4375)
    figure = pretrain_report.knn_figure(
        RECORDS, 0.2, summary["knn_accuracy_pixels"], knn_augmented_before=0.1
    )
    (axis,) = figure.axes
    pixels = [line for line in axis.get_lines() if line.get_label().startswith("raw pixels")]
    assert len(pixels) == 1
    assert list(pixels[0].get_ydata()) == [0.4375, 0.4375]
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert legend == [
        "clean test queries",
        "augmented test queries",
        "raw pixels, clean queries (0.438)",
    ]
    assert list(axis.get_lines()[0].get_ydata()) == [0.2, 0.4, 0.5]


def test_retrieval_figure_draws_each_raw_pixels_figure():
    before = {"recall_at_1_seen": 0.3, "map_at_r_seen": 0.1}
    records = [{"epoch": 1, "loss": 1.0, "recall_at_1_seen": 0.5, "map_at_r_seen": 0.2}]
    pixels = {"recall_at_1_seen": 0.375, "map_at_r_seen": 0.125}
    (axis,) = metric_report.retrieval_figure(records, before, pixels).axes
    lines = {line.get_label(): line for line in axis.get_lines()}
    assert list(lines["recall at 1 seen, raw pixels (0.375)"].get_ydata()) == [0.375] * 2
    assert list(lines["map at r seen, raw pixels (0.125)"].get_ydata()) == [0.125] * 2
    # The pixels' line has its curve's colour.
    assert (
        lines["map at r seen"].get_color() == lines["map at r seen, raw pixels (0.125)"].get_color()
    )


def test_nearest_held_out_leaves_the_query_out_and_matches_loops():
    rng = np.random.default_rng(5)
    embeddings = rng.normal(size=(12, 6)).astype(np.float32)
    rows = np.array([0, 7, 11])
    neighbours, distances = pretrain_report.nearest_held_out(embeddings, rows, k=4)
    assert neighbours.shape == distances.shape == (3, 4)
    for row, found, found_distances in zip(rows, neighbours, distances, strict=True):
        assert found.tolist() == _cosine_neighbours_loops(embeddings, row, 4)
        for other, distance in zip(found, found_distances, strict=True):
            a, b = embeddings[row].astype(np.float64), embeddings[other].astype(np.float64)
            expected = 1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
            assert distance == pytest.approx(expected, abs=1e-12)


def test_spread_queries_takes_every_class_once_before_any_twice():
    labels = np.repeat(np.arange(5), [6, 1, 3, 4, 2])
    rows = report.spread_queries(labels, 8, seed=3)
    assert len(rows) == len(set(rows.tolist())) == 8
    counts = np.bincount(labels[rows], minlength=5)
    assert counts.min() >= 1 and counts.max() <= 2  # 5 classes, then 3 of the 4 left with more
    np.testing.assert_array_equal(rows, report.spread_queries(labels, 8, seed=3))
    assert report.spread_queries(labels, 8, seed=4).tolist() != rows.tolist()
    # Fewer images than asked for: all of them.
    assert sorted(report.spread_queries(labels[:7], 8, seed=0).tolist()) == list(range(7))


def test_pretrain_plot_writes_a_neighbour_grid_with_the_wrong_ones_in_red(tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    labels = np.repeat(np.arange(4), 5)
    embeddings = rng.normal(size=(20, 6)) + labels[:, None] * 0.8
    images = rng.random((20, 4, 4, 3))
    drawn = []
    grid = report.plot_neighbors_grid

    def recording_grid(*args, **kwargs):
        drawn.append((args, grid(*args, **kwargs)))
        return drawn[-1][1]

    monkeypatch.setattr(report, "plot_neighbors_grid", recording_grid)
    pretrain_report.plot(
        tmp_path, RECORDS, 0.2, 0.3, images, embeddings, labels, list("abcd"), seed=1
    )
    for name in ["loss.png", "knn_accuracy.png", "neighbours.png", "embeddings.png"]:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    ((args, (figure, axes)),) = drawn
    queries = report.spread_queries(labels, report.NEIGHBOUR_QUERIES, seed=1)
    assert axes.shape == (report.NEIGHBOUR_QUERIES, report.NEIGHBOURS + 1)
    expected = []
    for query in queries:
        nearest = _cosine_neighbours_loops(embeddings, query, report.NEIGHBOURS)
        expected.append(["green" if labels[n] == labels[query] else "red" for n in nearest])
    assert _frames(axes) == expected
    assert any("red" in row for row in expected) and any("green" in row for row in expected)
    np.testing.assert_array_equal(args[0], images[queries])


def test_embeddings_figure_draws_the_ten_classes_with_most_images():
    counts = [3, 9, 1, 4, 4, 7, 2, 8, 5, 6, 2, 3, 1, 5, 4]
    labels = np.repeat(np.arange(15), counts)
    embeddings = np.random.default_rng(0).normal(size=(len(labels), 3))
    names = [f"class {c}" for c in range(15)]
    (axis,) = report.embeddings_figure(embeddings, labels, names).axes
    # The ten largest classes, ties to the lower class, by plain sorting of (-count, class).
    largest = sorted(sorted(range(15), key=lambda c: (-counts[c], c))[:10])
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    assert legend == [names[c] for c in largest]
    assert sum(len(c.get_offsets()) for c in axis.collections) == sum(counts[c] for c in largest)
    assert "10 of 15 classes" in axis.get_title()
    (axis,) = report.embeddings_figure(embeddings[:12], labels[:12], names).axes
    assert axis.get_title() == "Test embeddings (PCA), all 2 classes"


def test_metric_queries_are_half_seen_half_unseen():
    labels = np.repeat(np.arange(10), 3)
    rows, seen = metric_report.neighbour_queries(labels, train_classes=6, seed=0)
    assert seen == report.NEIGHBOUR_QUERIES // 2 == 4
    assert (labels[rows[:4]] < 6).all() and (labels[rows[4:]] >= 6).all()
    rows, seen = metric_report.neighbour_queries(labels, train_classes=10, seed=0)
    assert seen == len(rows) == report.NEIGHBOUR_QUERIES


def test_one_held_out_image_has_no_neighbour_grid_and_says_so(tmp_path):
    with pytest.warns(UserWarning, match="neighbours.png is not written"):
        pretrain_report.plot(
            tmp_path, RECORDS, 0.2, 0.3, np.zeros((1, 4, 4, 3)), np.ones((1, 3)), [0], ["a"], 0
        )
    assert not (tmp_path / "neighbours.png").exists()
    assert (tmp_path / "embeddings.png").is_file()
