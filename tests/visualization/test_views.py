"""visualize_views: the panels hold each image's views side by side, rescaled; titles, errors."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from matplotlib import pyplot as plt  # noqa: E402

from tensorflow_similarity.visualization import visualize_views  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def panel_reference(views, i, low, high):
    """Image i's views left to right, each pixel rescaled to [0, 1], one pixel at a time."""
    height, width = views[0][i].shape[:2]
    panel = np.zeros((height, width * len(views)) + views[0][i].shape[2:])
    for j, view in enumerate(views):
        for r in range(height):
            for c in range(width):
                value = (np.float64(view[i][r, c]) - low) / abs(high - low)
                panel[r, j * width + c] = np.clip(value, 0.0, 1.0)
    return panel


def _views(num_views=2, num_images=5, channels=3):
    rng = np.random.default_rng(0)
    return [
        rng.uniform(0, 255, size=(num_images, 4, 3, channels)).astype("float32")
        for _ in range(num_views)
    ]


def test_panels_are_the_views_side_by_side_rescaled(tmp_path):
    views = _views()

    figure, axes = visualize_views(
        views, num_imgs=5, views_per_col=3, max_pixel_value=255.0, show=False
    )
    figure.savefig(tmp_path / "views.png")

    assert axes.shape == (2, 3)
    for i in range(5):
        ax = axes[i // 3, i % 3]
        drawn = np.asarray(ax.get_images()[0].get_array())
        np.testing.assert_allclose(drawn, panel_reference(views, i, 0.0, 255.0), atol=1e-12)
        assert ax.get_title() == ""
    assert not axes[1, 2].get_images() and not axes[1, 2].axison
    assert (tmp_path / "views.png").stat().st_size > 0


def test_titles_with_labels_and_predictions():
    views = [tf.constant(v / 255.0) for v in _views(num_views=3, num_images=4)]
    labels = tf.constant([7, 8, 9, 10])
    predictions = np.array([[0.25], [0.5], [0.125], [1.0]])

    _, with_predictions = visualize_views(views, predictions=predictions, show=False)
    _, with_labels = visualize_views(views, labels, num_imgs=2, views_per_col=2, show=False)
    _, both = visualize_views(views, [3, 1, 4, 1], predictions.ravel(), show=False)

    assert [ax.get_title() for ax in with_predictions.flat] == [
        "Label: 0 | Pred: 0.25000",
        "Label: 1 | Pred: 0.50000",
        "Label: 2 | Pred: 0.12500",
        "Label: 3 | Pred: 1.00000",
    ]
    assert [ax.get_title() for ax in with_labels.flat] == ["Label: 7", "Label: 8"]
    assert both[0, 2].get_title() == "Label: 4 | Pred: 0.12500"
    assert np.asarray(with_labels[0, 0].get_images()[0].get_array()).shape == (4, 9, 3)


def test_single_channel_images_are_drawn_in_grey_with_a_pixel_range():
    views = [v - 1.0 for v in _views(num_views=2, num_images=1, channels=1)]

    _, axes = visualize_views(views, max_pixel_value=100.0, min_pixel_value=-1.0, show=False)

    image = axes[0, 0].get_images()[0]
    reference = panel_reference(views, 0, -1.0, 100.0)[..., 0]
    np.testing.assert_allclose(np.asarray(image.get_array()), reference, atol=1e-12)
    assert image.get_cmap().name == "gray"
    assert reference.max() == 1.0  # pixels above max_pixel_value are clipped


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"views": []}, "views is empty"),
        ({"views": [np.zeros((2, 4, 4, 3)), np.zeros((3, 4, 4, 3))]}, "lengths \\[2, 3\\]"),
        ({"num_imgs": 6}, "num_imgs=6 exceeds the 5 images"),
        ({"num_imgs": 0}, "num_imgs"),
        ({"views_per_col": 0}, "views_per_col"),
        ({"labels": [1, 2]}, "labels holds 2 entries for 5 images"),
        ({"max_pixel_value": 0.0}, "are equal"),
    ],
)
def test_bad_arguments_are_refused_before_drawing(kwargs, match):
    arguments = {"views": _views(), "show": False, **kwargs}
    with pytest.raises(ValueError, match=match):
        visualize_views(**arguments)
    assert not plt.get_fignums()
