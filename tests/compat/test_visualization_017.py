"""0.17's `visualization.projector` arguments on the matplotlib projector, and `tensor2images`."""

from __future__ import annotations

import base64
import io

import matplotlib
import matplotlib.pyplot
import numpy as np
import pytest
from matplotlib.offsetbox import AnnotationBbox
from PIL import Image

from tensorflow_similarity.visualization.projector import projector, tensor2images

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    matplotlib.pyplot.close("all")


@pytest.fixture
def embeddings():
    rng = np.random.default_rng(0)
    return rng.normal(size=(12, 5)), np.repeat(np.arange(3), 4)


def _colours(figure):
    return [tuple(np.round(c.get_facecolor()[0][:3], 6)) for c in figure.axes[0].collections]


def test_017_positional_arguments_draw_images_colours_and_size(embeddings):
    x, y = embeddings
    images = np.random.default_rng(1).random((12, 8, 8, 1))

    # 0.17's order: embeddings, labels, class_mapping, images, image_size, tooltips_info,
    # pt_size, colorize, pastel_factor, plot_size.
    figure, coords = projector(
        x, y, ["a", "b", "c"], images, 32, None, 5, True, 0.5, 400, show=False
    )

    thumbnails = [a for a in figure.axes[0].artists if isinstance(a, AnnotationBbox)]
    assert len(thumbnails) == 12 and coords.shape == (12, 2)
    np.testing.assert_allclose(figure.get_size_inches() * figure.dpi, [400, 400])
    legend = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert legend == ["a", "b", "c"]
    # pastel_factor 0.5 lightens tab10's colours: (c + 0.5) / 1.5.
    tab10 = matplotlib.colormaps["tab10"](np.arange(3))[:, :3]
    np.testing.assert_allclose(_colours(figure), (tab10 + 0.5) / 1.5, atol=1e-6)


def test_colorize_false_draws_one_colour_without_legend(embeddings):
    x, y = embeddings

    figure, _ = projector(x, y, colorize=False, show=False)

    assert len(figure.axes[0].collections) == 1
    assert figure.axes[0].get_legend() is None


def test_what_a_static_figure_cannot_do_warns(embeddings):
    x, y = embeddings

    with pytest.warns(UserWarning, match="tooltips_info"):
        projector(x, y, tooltips_info={"name": ["n"] * 12}, show=False)
    with pytest.warns(UserWarning, match="active_drag"):
        projector(x, y, active_drag="pan", show=False)
    with pytest.warns(UserWarning, match="densmap"):
        projector(x, y, densmap=True, show=False)


def test_bad_017_arguments_are_refused_or_warn(embeddings):
    x, y = embeddings

    with pytest.warns(FutureWarning, match="plot_size=550"):
        figure, _ = projector(x, y, plot_size=5.5, show=False)
    np.testing.assert_allclose(figure.get_size_inches(), [5.5, 5.5])
    with pytest.raises(ValueError, match="one image"):
        projector(x, y, images=np.zeros((3, 8, 8)), show=False)


def test_tensor2images_encodes_jpeg_data_urls():
    images = np.random.default_rng(2).random((3, 10, 12, 3))

    urls = tensor2images(images, size=16)
    grey = tensor2images(np.zeros((1, 5, 5, 1)), size=8)

    assert len(urls) == 3 and all(u.startswith("data:image/jpeg;base64,") for u in urls)
    decoded = Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1])))
    assert decoded.size == (16, 16) and decoded.mode == "RGB"
    assert Image.open(io.BytesIO(base64.b64decode(grey[0].split(",", 1)[1]))).mode == "L"
