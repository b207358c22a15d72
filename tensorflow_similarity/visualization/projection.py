"""Embeddings projected to 2-D (PCA, or UMAP if installed) and scattered by class."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib import pyplot as plt

from tensorflow_similarity._validation import check_choice


def project_embeddings(embeddings: Any, method: str = "pca", seed: int = 0) -> np.ndarray:
    """Returns the `[n, 2]` projection of `[n, d]` embeddings.

    Args:
        embeddings: The embeddings.
        method: `"pca"` (exact, NumPy's SVD of the centred embeddings; the
            first coordinate has the largest variance) or `"umap"` (needs
            `umap-learn`). Defaults to `"pca"`.
        seed: UMAP's random state. Defaults to 0.

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
        return np.asarray(umap.UMAP(random_state=seed).fit_transform(embeddings), np.float64)
    centred = embeddings - embeddings.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    coords = centred @ components[:2].T
    if coords.shape[1] < 2:
        coords = np.pad(coords, ((0, 0), (0, 2 - coords.shape[1])))
    return coords


def projector(
    embeddings: Any,
    labels: Sequence[Any] | None = None,
    class_mapping: Mapping[Any, str] | Sequence[str] | None = None,
    method: str = "pca",
    pt_size: float = 3.0,
    plot_size: float = 6.0,
    title: str | None = None,
    show: bool = True,
) -> tuple[Any, np.ndarray]:
    """Scatters the embeddings projected to 2-D, one colour per class.

    0.17's `projector` drew an interactive bokeh plot with UMAP; this one is
    a matplotlib figure, PCA by default.

    Args:
        embeddings: `[n, d]` embeddings (`model.predict(x)`).
        labels: `n` classes, or `None` (one colour).
        class_mapping: Class id to name for the legend (a dict or list), or
            `None` for the ids.
        method: `"pca"` or `"umap"` (see `project_embeddings`).
        pt_size: Point size. Defaults to 3.
        plot_size: Figure width and height in inches. Defaults to 6.
        title: The plot title. Defaults to the method's name.
        show: Call `plt.show()`. Defaults to `True`.

    Returns:
        `(figure, coords)`: the figure and the `[n, 2]` coordinates drawn.

    Raises:
        ValueError: If `labels` does not have one class per embedding, or
            for a bad `method` or embeddings.

    Example:

    >>> figure, coords = projector(model.predict(x_test), y_test, show=False)
    """
    coords = project_embeddings(embeddings, method=method)
    figure, ax = plt.subplots(figsize=(plot_size, plot_size))
    if labels is None:
        ax.scatter(coords[:, 0], coords[:, 1], s=pt_size)
    else:
        labels = np.asarray(labels)
        if labels.shape != (len(coords),):
            raise ValueError(
                f"Got labels of shape {labels.shape} for {len(coords)} embeddings. Pass one "
                "class per embedding."
            )
        for label in np.unique(labels):
            mask = labels == label
            name = label if class_mapping is None else class_mapping[label]
            ax.scatter(coords[mask, 0], coords[mask, 1], s=pt_size, label=str(name))
        ax.legend(markerscale=3, fontsize="small", loc="best")
    ax.set_title(title if title is not None else f"{method.upper()} projection")
    ax.set_xticks([])
    ax.set_yticks([])
    figure.tight_layout()
    if show:
        plt.show()
    return figure, coords
