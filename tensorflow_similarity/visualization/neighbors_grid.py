"""Queries beside their nearest neighbours, one row each, wrong neighbours framed in red."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

# Frame colours and widths: a wrong neighbour must stand out at a glance, in print and to a
# reader who does not tell red from green, so it also has a thicker frame and a cross.
WRONG_COLOR = "red"
RIGHT_COLOR = "green"
_WRONG_WIDTH = 4.0
_RIGHT_WIDTH = 2.0


def plot_neighbors_grid(
    query_images: Any,
    query_labels: Any,
    neighbor_images: Any,
    neighbor_labels: Any,
    class_names: Sequence[str] | Mapping[int, str] | None = None,
    neighbor_distances: Any = None,
    title: str | None = None,
    cell_size: float = 1.3,
) -> tuple[Figure, np.ndarray]:
    """Draws each query beside its nearest neighbours, wrong ones framed in red.

    One row per query: the query (black frame, titled with its class), then
    its `k` neighbours nearest first, each titled with its class (and its
    distance when `neighbor_distances` is given). A neighbour of the query's
    class has a thin green frame; one of another class a thick red frame and
    a title starting with a cross, so that it stands out without colour too.

    The figure is a `matplotlib.figure.Figure` made without pyplot: no GUI
    backend is chosen, and `figure.savefig` renders it with Agg.

    Args:
        query_images: `[q, h, w]` or `[q, h, w, c]` images (values in
            `[0, 1]` or `[0, 255]`; one channel is drawn grey).
        query_labels: The `q` queries' classes (integers).
        neighbor_images: `[q, k, h, w]` or `[q, k, h, w, c]` images: row
            `i` holds query `i`'s `k` neighbours, nearest first.
        neighbor_labels: `[q, k]` classes of the neighbours.
        class_names: Class to the name shown (a list indexed by class, or a
            dict), or `None` for the class numbers. Defaults to `None`.
        neighbor_distances: `[q, k]` distances shown under the names, or
            `None` for none. Defaults to `None`.
        title: The figure's title, or `None` for none. Defaults to `None`.
        cell_size: Width and height of one image in inches. Defaults to 1.3.

    Returns:
        `(figure, axes)`: the figure and its `[q, k + 1]` array of axes,
        column 0 the queries.

    Raises:
        ValueError: If there is no query or no neighbour, if the shapes do not
            agree (one label per image, `q` rows of `k` neighbours, images of
            one size), or if `class_names` has no name for a class drawn.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.visualization import plot_neighbors_grid
    >>> queries = np.zeros((2, 8, 8))
    >>> neighbours = np.ones((2, 3, 8, 8))
    >>> figure, axes = plot_neighbors_grid(queries, [0, 1], neighbours, [[0, 1, 0], [1, 1, 0]],
    ...                               class_names=["zero", "one"])
    >>> axes.shape
    (2, 4)
    >>> [ax.get_title() for ax in axes[0]]
    ['query: zero', 'zero', '✗ one', 'zero']
    >>> axes[0, 2].spines["top"].get_edgecolor() == (1.0, 0.0, 0.0, 1.0)
    True
    """
    queries = np.asarray(query_images)
    query_labels = np.asarray(query_labels)
    neighbours = np.asarray(neighbor_images)
    neighbour_labels = np.asarray(neighbor_labels)
    _check_shapes(queries, query_labels, neighbours, neighbour_labels, neighbor_distances)
    names = _names(class_names, [*query_labels.tolist(), *neighbour_labels.ravel().tolist()])
    count, k = neighbour_labels.shape
    # Fixed margins in inches rather than tight_layout, which costs seconds on 50 axes.
    labels_height = 0.34 if neighbor_distances is not None else 0.2
    # Above the first row: its labels, and the title's lines.
    top = 0.1 + labels_height + (0.2 * (title.count("\n") + 1) if title else 0.0)
    width = (k + 1) * cell_size * 1.1 + 0.2
    height = count * (cell_size + labels_height) + top + 0.1
    figure = Figure(figsize=(width, height))
    axes = figure.subplots(count, k + 1, squeeze=False)
    figure.subplots_adjust(
        left=0.1 / width,
        right=1.0 - 0.1 / width,
        bottom=0.1 / height,
        top=1.0 - top / height,
        wspace=0.1,
        hspace=labels_height / cell_size,
    )
    for row in range(count):
        query_label = int(query_labels[row])
        _draw(axes[row, 0], queries[row], f"query: {names[query_label]}", "black", 1.5)
        for column in range(k):
            label = int(neighbour_labels[row, column])
            right = label == query_label
            text = names[label] if right else f"✗ {names[label]}"
            if neighbor_distances is not None:
                text += f"\n{float(np.asarray(neighbor_distances)[row, column]):.3f}"
            _draw(
                axes[row, column + 1],
                neighbours[row, column],
                text,
                RIGHT_COLOR if right else WRONG_COLOR,
                _RIGHT_WIDTH if right else _WRONG_WIDTH,
            )
    if title:
        figure.suptitle(title, fontsize=10, y=1.0 - 0.05 / height, va="top")
    return figure, axes


def _check_shapes(
    queries: np.ndarray,
    query_labels: np.ndarray,
    neighbours: np.ndarray,
    neighbour_labels: np.ndarray,
    distances: Any,
) -> None:
    if queries.ndim not in (3, 4) or len(queries) == 0:
        raise ValueError(
            f"plot_neighbors_grid: got query_images of shape {queries.shape}; pass at least one "
            "image, as [q, h, w] or [q, h, w, c]."
        )
    count = len(queries)
    if query_labels.shape != (count,):
        raise ValueError(
            f"plot_neighbors_grid: got query_labels of shape {query_labels.shape} for {count} "
            "query images; pass one class per query."
        )
    shape = neighbour_labels.shape
    if len(shape) != 2 or shape[0] != count or shape[1] == 0:
        raise ValueError(
            f"plot_neighbors_grid: got neighbor_labels of shape {neighbour_labels.shape} for "
            f"{count} queries; pass [q, k] classes, k >= 1 neighbours per query."
        )
    expected = neighbour_labels.shape + queries.shape[1:]
    if neighbours.shape != expected:
        raise ValueError(
            f"plot_neighbors_grid: got neighbor_images of shape {neighbours.shape}; with "
            f"{count} queries of shape {queries.shape[1:]} and neighbor_labels of shape "
            f"{neighbour_labels.shape} they must be {expected}."
        )
    if distances is not None and np.shape(distances) != neighbour_labels.shape:
        raise ValueError(
            f"plot_neighbors_grid: got neighbor_distances of shape {np.shape(distances)}; pass "
            f"one per neighbour, {neighbour_labels.shape}, or None."
        )


def _names(
    class_names: Sequence[str] | Mapping[int, str] | None, labels: list[Any]
) -> dict[int, str]:
    labels = sorted({int(label) for label in labels})
    if class_names is None:
        return {label: str(label) for label in labels}
    if isinstance(class_names, Mapping):
        missing = [label for label in labels if label not in class_names]
        names = class_names
    else:
        missing = [label for label in labels if not 0 <= label < len(class_names)]
        names = dict(enumerate(class_names))
    if missing:
        raise ValueError(
            f"plot_neighbors_grid: class_names has no name for the classes {missing}; pass a name "
            "for every class drawn, or class_names=None for the numbers."
        )
    return {label: str(names[label]) for label in labels}


def _displayable(image: np.ndarray) -> np.ndarray:
    image = np.asarray(image, np.float64)
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if image.max(initial=0.0) > 1.0:
        # imshow clips float RGB to [0, 1]; rescale images given in [0, 255].
        image = image / 255.0
    return np.clip(image, 0.0, 1.0)


def _draw(axis: Any, image: np.ndarray, title: str, color: str, width: float) -> None:
    image = _displayable(image)
    axis.imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0.0, vmax=1.0)
    axis.set_title(title, color=color, fontsize=8)
    axis.set_xticks([])
    axis.set_yticks([])
    for spine in axis.spines.values():
        spine.set_edgecolor(color)
        spine.set_linewidth(width)
