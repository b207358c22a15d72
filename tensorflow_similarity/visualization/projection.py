"""Embeddings projected to 2-D (PCA, or UMAP if installed) and scattered by class."""

from __future__ import annotations

import base64
import importlib
import io
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib import pyplot as plt
from matplotlib.offsetbox import AnnotationBbox, OffsetImage
from PIL import Image

from tensorflow_similarity._validation import check_choice


def project_embeddings(
    embeddings: Any, method: str = "pca", seed: int = 0, densmap: bool = False
) -> np.ndarray:
    """Returns the `[n, 2]` projection of `[n, d]` embeddings.

    Args:
        embeddings: The embeddings.
        method: `"pca"` (exact, NumPy's SVD of the centred embeddings; the
            first coordinate has the largest variance) or `"umap"` (needs
            `umap-learn`). Defaults to `"pca"`.
        seed: UMAP's random state. Defaults to 0.
        densmap: UMAP's density-preserving variant (`method="umap"` only).
            Defaults to `False`.

    Returns:
        The coordinates, float64.

    Raises:
        ValueError: For an unknown method or embeddings that are not `[n, d]`
            with `n >= 2`.
        ImportError: For `"umap"` without `umap-learn`.
    """
    method = check_choice("method", method, ("pca", "umap"), owner="project_embeddings")
    embeddings = np.asarray(embeddings, dtype=np.float64)
    if embeddings.ndim != 2 or len(embeddings) < 2:
        raise ValueError(f"Expected [n, d] embeddings with n >= 2; got shape {embeddings.shape}.")
    if method == "umap":
        try:
            umap = importlib.import_module("umap")
        except ImportError:
            raise ImportError(
                "method='umap' needs umap-learn: pip install umap-learn, or use method='pca'."
            ) from None
        return np.asarray(
            umap.UMAP(random_state=seed, densmap=densmap).fit_transform(embeddings), np.float64
        )
    centred = embeddings - embeddings.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    coords = centred @ components[:2].T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    return coords


# Screen pixels per inch of the figure: 0.17's `plot_size` and `image_size` are pixels.
_DPI = 100


def projector(
    embeddings: Any,
    labels: Sequence[Any] | None = None,
    class_mapping: Mapping[Any, str] | Sequence[str] | None = None,
    images: Any = None,
    image_size: int = 64,
    tooltips_info: Mapping[str, Sequence[str]] | None = None,
    pt_size: float = 3.0,
    colorize: bool = True,
    pastel_factor: float = 0.1,
    plot_size: int = 600,
    active_drag: str = "box_zoom",
    densmap: bool | None = None,
    *,
    method: str = "pca",
    title: str | None = None,
    show: bool = True,
) -> tuple[Any, np.ndarray]:
    """Scatters the embeddings projected to 2-D, one colour per class.

    0.17's arguments, in 0.17's order, on a static matplotlib figure (0.17
    drew an interactive bokeh plot with UMAP; the projection here is PCA
    unless `method="umap"`). `images` are drawn as thumbnails at their
    points (0.17 showed them on hover). What needs an interactive plot,
    `tooltips_info` and an `active_drag` other than the default, cannot be
    honoured: each warns, and is otherwise ignored.

    Args:
        embeddings: `[n, d]` embeddings (`model.predict(x)`).
        labels: `n` classes (integers or names), or `None` (one colour).
        class_mapping: Class to name for the legend (a dict or list), or
            `None` for the classes themselves.
        images: `n` images `[n, h, w]` or `[n, h, w, c]` (values in
            `[0, 1]` or `[0, 255]`) drawn at their points, or `None`.
        image_size: The thumbnails' side in pixels. Defaults to 64.
        tooltips_info: 0.17's hover tooltips: ignored, with a warning.
        pt_size: Point size. Defaults to 3.
        colorize: One colour per class if `True` (default); all points one
            colour, without legend, if `False`.
        pastel_factor: Lightens the class colours, each channel `c` becoming
            `(c + pastel_factor) / (1 + pastel_factor)`. Defaults to 0.1.
        plot_size: The figure's width and height in pixels (at 100 dpi).
            Defaults to 600. A value below 50 is taken as inches (0.18-dev's
            unit), with a `FutureWarning`.
        active_drag: 0.17's bokeh drag tool; anything but the default
            `"box_zoom"` warns (a static figure has none).
        densmap: UMAP's density-preserving variant, for `method="umap"`;
            `None` (default) means 0.17's `True` there. Given with PCA, it
            warns.
        method: `"pca"` (default) or `"umap"` (see `project_embeddings`).
        title: The plot title. Defaults to the method's name.
        show: Call `plt.show()`. Defaults to `True`.

    Returns:
        `(figure, coords)`: the figure and the `[n, 2]` coordinates drawn.

    Raises:
        ValueError: If `labels` or `images` does not have one item per
            embedding, or for a bad `method` or embeddings.

    Example:

    With `model.predict(x_test)` as the embeddings, or random ones:

    >>> import numpy as np
    >>> from matplotlib import pyplot as plt
    >>> from tensorflow_similarity.visualization import projector
    >>> embeddings = np.random.default_rng(0).normal(size=(20, 8))
    >>> figure, coords = projector(embeddings, np.arange(20) % 2, show=False)
    >>> coords.shape
    (20, 2)
    >>> plt.close(figure)
    """
    if plot_size < 50:
        warnings.warn(
            f"projector(plot_size={plot_size!r}) is taken as inches, the unit of 0.18-dev; "
            f"plot_size is the figure's side in pixels, as in 0.17 (100 per inch): pass "
            f"plot_size={int(round(plot_size * _DPI))}.",
            FutureWarning,
            stacklevel=2,
        )
        plot_size = plot_size * _DPI
    if tooltips_info:
        warnings.warn(
            "projector(tooltips_info=...) is ignored: tooltips need an interactive plot "
            "(0.17 drew one with bokeh); this figure is static. Drop tooltips_info.",
            UserWarning,
            stacklevel=2,
        )
    if active_drag != "box_zoom":
        warnings.warn(
            f"projector(active_drag={active_drag!r}) is ignored: a static matplotlib figure "
            "has no drag tool. Drop active_drag.",
            UserWarning,
            stacklevel=2,
        )
    if method != "umap" and densmap is not None:
        warnings.warn(
            f"projector(densmap={densmap!r}) applies to method='umap' only; method="
            f"{method!r} ignores it.",
            UserWarning,
            stacklevel=2,
        )
    coords = project_embeddings(
        embeddings, method=method, densmap=True if densmap is None else bool(densmap)
    )
    thumbnails = None if images is None else _thumbnails(images, len(coords))
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape != (len(coords),):
            raise ValueError(
                f"Got labels of shape {labels.shape} for {len(coords)} embeddings. Pass one "
                "class per embedding."
            )
    side = plot_size / _DPI
    figure, ax = plt.subplots(figsize=(side, side), dpi=_DPI)
    if labels is None or not colorize:
        ax.scatter(coords[:, 0], coords[:, 1], s=pt_size)
    else:
        classes = np.unique(labels)
        colours = _class_colours(len(classes), pastel_factor)
        for label, colour in zip(classes, colours, strict=True):
            mask = labels == label
            name = label if class_mapping is None else class_mapping[label]
            ax.scatter(coords[mask, 0], coords[mask, 1], s=pt_size, color=colour, label=str(name))
        ax.legend(markerscale=3, fontsize="small", loc="best")
    if thumbnails is not None:
        for (x, y), image in zip(coords, thumbnails, strict=True):
            zoom = image_size / max(image.shape[:2]) * 72 / _DPI
            grey = "gray" if image.ndim == 2 else None
            box = OffsetImage(image, zoom=zoom, cmap=grey)
            ax.add_artist(AnnotationBbox(box, (x, y), frameon=False))
    ax.set_title(title if title is not None else f"{method.upper()} projection")
    ax.set_xticks([])
    ax.set_yticks([])
    figure.tight_layout()
    if show:
        plt.show()
    return figure, coords


def _class_colours(count: int, pastel_factor: float) -> np.ndarray:
    """`count` distinct RGB colours (tab10, tab20, then evenly spaced hues), lightened."""
    if count <= 10:
        rgb = colormaps["tab10"](np.arange(count))[:, :3]
    elif count <= 20:
        rgb = colormaps["tab20"](np.arange(count))[:, :3]
    else:
        rgb = colormaps["hsv"](np.arange(count) / count)[:, :3]
    return (rgb + pastel_factor) / (1.0 + pastel_factor)


def _as_uint8_images(images: Any) -> np.ndarray:
    """Images as uint8 `[n, h, w]` (one channel) or `[n, h, w, c]`; `[0, 1]` values scaled."""
    data = np.asarray(images, dtype=np.float64)
    if data.size and np.max(data) <= 1.0:
        data = data * 255.0
    data = np.clip(np.round(data), 0, 255).astype(np.uint8)
    if data.ndim == 4 and data.shape[-1] == 1:
        data = data[..., 0]
    return data


def _thumbnails(images: Any, count: int) -> np.ndarray:
    data = _as_uint8_images(images)
    if data.ndim not in (3, 4) or len(data) != count:
        raise ValueError(
            f"Got images of shape {data.shape} for {count} embeddings. Pass one image "
            "[h, w] or [h, w, c] per embedding."
        )
    return data


def tensor2images(tensor: Any, size: int = 64) -> list[str]:
    """Returns each image as a base64 JPEG data URL, `size` x `size` pixels (0.17's helper).

    As 0.17: images whose values are all at most 1 are scaled by 255, and a
    single channel is grey. The URLs say `image/jpeg` (0.17's said
    `image/png` for the same JPEG bytes).

    Args:
        tensor: `[n, h, w]` or `[n, h, w, c]` images.
        size: The side of each output image in pixels. Defaults to 64.

    Returns:
        `n` strings `"data:image/jpeg;base64,..."`, for HTML `<img src=...>`.
    """
    urls = []
    for image in _as_uint8_images(tensor):
        picture = Image.fromarray(image).convert("L" if image.ndim == 2 else "RGB")
        buffer = io.BytesIO()
        picture.resize((size, size)).save(buffer, format="JPEG")
        urls.append("data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode())
    return urls
