"""Visualisation: figures render (Agg, to files) and the numbers drawn are right."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib import pyplot as plt  # noqa: E402

from tensorflow_similarity import visualization  # noqa: E402
from tensorflow_similarity.types import Lookup  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _neighbours(rng, labels):
    return [
        Lookup(rank=i + 1, distance=0.1 * (i + 1), label=label, data=rng.random((8, 8, 3)))
        for i, label in enumerate(labels)
    ]


def test_neighbours_grid_titles_and_colours(tmp_path):
    rng = np.random.default_rng(0)
    neighbours = _neighbours(rng, [3, 5, 3])
    figure, axes = visualization.viz_neighbors_imgs(
        rng.random((8, 8, 3)), 3, neighbours, class_mapping={3: "three"}, show=False
    )
    figure.savefig(tmp_path / "neighbours.png")
    assert (tmp_path / "neighbours.png").stat().st_size > 0
    assert len(axes) == 4
    titles = [ax.get_title() for ax in axes]
    assert titles == ["three", "three - 0.10000", "5 - 0.20000", "three - 0.30000"]
    colours = [ax.title.get_color() for ax in axes]
    assert colours == ["black", "black", "red", "black"]


def test_neighbours_alias_and_errors():
    assert visualization.viz_neigbors_imgs is visualization.viz_neighbors_imgs
    with pytest.raises(ValueError, match="empty"):
        visualization.viz_neighbors_imgs(np.zeros((4, 4)), 0, [], show=False)
    with pytest.raises(ValueError, match="data=x"):
        visualization.viz_neighbors_imgs(
            np.zeros((4, 4)), 0, [Lookup(rank=1, distance=0.0, label=0)], show=False
        )


@pytest.mark.parametrize("normalize", [True, False])
def test_confusion_matrix_against_loops(tmp_path, normalize):
    rng = np.random.default_rng(1)
    y_true = rng.integers(0, 4, size=60)
    y_pred = np.where(rng.random(60) < 0.7, y_true, rng.integers(-1, 4, size=60))
    ax, matrix = visualization.confusion_matrix(y_pred, y_true, normalize=normalize, show=False)
    ax.figure.savefig(tmp_path / "cm.png")
    expected = np.zeros((4, 4))
    for t, p in zip(y_true, y_pred, strict=True):
        if p >= 0:
            expected[t, p] += 1
    if normalize:
        for row in range(4):
            expected[row] /= np.sum(y_true == row)
    np.testing.assert_allclose(matrix, expected)
    accuracy = np.mean(y_true == y_pred)
    assert f"accuracy={accuracy:0.4f}" in ax.get_xlabel()


def test_confusion_matrix_errors():
    with pytest.raises(ValueError, match="one prediction"):
        visualization.confusion_matrix([0, 1], [0], show=False)
    with pytest.raises(ValueError, match=">= 0"):
        visualization.confusion_matrix([0, -2], [0, 1], show=False)


def test_pca_projection_matches_sklearn(tmp_path):
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(2)
    embeddings = rng.normal(size=(50, 6)) * np.array([5.0, 3.0, 1.0, 0.5, 0.1, 0.1])
    labels = rng.integers(0, 3, size=50)
    figure, coords = visualization.projector(
        embeddings, labels, class_mapping=["a", "b", "c"], show=False
    )
    figure.savefig(tmp_path / "projection.png")
    reference = PCA(n_components=2).fit_transform(embeddings)
    # Each component is defined up to its sign.
    signs = np.sign(np.sum(coords * reference, axis=0))
    np.testing.assert_allclose(coords * signs, reference, atol=1e-8)
    legend = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert legend == ["a", "b", "c"]


def test_projection_errors():
    with pytest.raises(ValueError, match="one class per embedding"):
        visualization.projector(np.zeros((5, 3)), [0, 1], show=False)
    with pytest.raises(ValueError, match="method"):
        visualization.project_embeddings(np.zeros((5, 3)), method="tsne")
    with pytest.raises(ValueError, match="n >= 2"):
        visualization.project_embeddings(np.zeros((1, 3)))
    try:
        import umap  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="umap-learn"):
            visualization.project_embeddings(np.zeros((5, 3)), method="umap")
