"""`plot_neighbors_grid`: one row per query, wrong neighbours framed in red, right ones in green."""

from __future__ import annotations

import matplotlib.colors
import numpy as np
import pytest

from tensorflow_similarity.visualization import plot_neighbors_grid

RED = matplotlib.colors.to_rgba("red")
GREEN = matplotlib.colors.to_rgba("green")


def _frame(axis) -> set[tuple[float, ...]]:
    return {tuple(spine.get_edgecolor()) for spine in axis.spines.values()}


def test_wrong_neighbours_have_red_frames_right_ones_green():
    rng = np.random.default_rng(3)
    queries = rng.random((4, 6, 6, 3))
    query_labels = np.array([0, 1, 2, 1])
    neighbour_labels = rng.integers(0, 3, size=(4, 5))
    neighbours = rng.random((4, 5, 6, 6, 3))
    figure, axes = plot_neighbors_grid(
        queries, query_labels, neighbours, neighbour_labels, class_names=["a", "b", "c"]
    )
    assert axes.shape == (4, 6)
    assert len(figure.axes) == 4 * 6
    # Which neighbours are wrong, by plain loops over the rows.
    wrong = []
    for row in range(4):
        for column in range(5):
            if neighbour_labels[row, column] != query_labels[row]:
                wrong.append((row, column + 1))
    assert wrong  # the seed draws some of each
    red = [(r, c) for r in range(4) for c in range(1, 6) if _frame(axes[r, c]) == {RED}]
    green = [(r, c) for r in range(4) for c in range(1, 6) if _frame(axes[r, c]) == {GREEN}]
    assert red == wrong
    assert sorted(red + green) == [(r, c) for r in range(4) for c in range(1, 6)]
    for row in range(4):
        assert _frame(axes[row, 0]) == {matplotlib.colors.to_rgba("black")}
        assert axes[row, 0].get_title() == f"query: {'abc'[query_labels[row]]}"
    for row, column in wrong:
        assert axes[row, column].get_title().startswith("✗ ")
    # The image drawn is the neighbour's.
    np.testing.assert_allclose(axes[2, 3].get_images()[0].get_array(), neighbours[2, 2])


def test_distances_and_grey_images_in_0_255():
    figure, axes = plot_neighbors_grid(
        np.full((1, 5, 5, 1), 255.0),
        [7],
        np.zeros((1, 2, 5, 5, 1)),
        [[7, 3]],
        neighbor_distances=[[0.125, 0.5]],
        title="t",
    )
    assert [ax.get_title() for ax in axes[0]] == ["query: 7", "7\n0.125", "✗ 3\n0.500"]
    assert axes[0, 0].get_images()[0].get_array().max() == 1.0
    assert figure.get_suptitle() == "t"


@pytest.mark.parametrize(
    "change, message",
    [
        ({"query_images": np.zeros((0, 4, 4))}, "at least one image"),
        ({"query_labels": [0]}, "one class per query"),
        ({"neighbor_labels": np.zeros((2, 0), int)}, "k >= 1"),
        ({"neighbor_images": np.zeros((2, 3, 5, 5))}, r"must be \(2, 3, 4, 4\)"),
        ({"neighbor_distances": np.zeros((2, 2))}, "one per neighbour"),
        ({"class_names": ["zero"]}, r"no name for the classes \[1\]"),
    ],
)
def test_bad_input_is_named(change, message):
    arguments = {
        "query_images": np.zeros((2, 4, 4)),
        "query_labels": [0, 1],
        "neighbor_images": np.zeros((2, 3, 4, 4)),
        "neighbor_labels": np.zeros((2, 3), int),
        **change,
    }
    with pytest.raises(ValueError, match=message):
        plot_neighbors_grid(**arguments)
