"""A query image beside the images of its nearest neighbours."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib import pyplot as plt

from tensorflow_similarity.types import Lookup


def viz_neighbors_imgs(
    example: Any,
    example_class: int | None,
    neighbors: Sequence[Lookup],
    class_mapping: Mapping[int, str] | None = None,
    fig_size: tuple[float, float] = (24, 4),
    cmap: str = "viridis",
    show: bool = True,
) -> tuple[Any, np.ndarray]:
    """Draws the query, then each neighbour titled with its class and distance.

    A neighbour of another class than the query is drawn in the `"Reds"`
    colour map (for single-channel images) and its title in red. Neighbours
    need their image as `data` (index with `data=x`).

    Args:
        example: The query image, `[h, w]` or `[h, w, channels]`.
        example_class: Its class, or `None`.
        neighbors: Its `Lookup`s, from `model.single_lookup` or one row of
            `model.lookup`.
        class_mapping: Class id to the name shown, or `None` for the ids.
        fig_size: The figure size in inches. Defaults to `(24, 4)`.
        cmap: Colour map of single-channel images. Defaults to `"viridis"`.
        show: Call `plt.show()`. Defaults to `True`.

    Returns:
        `(figure, axes)`: the matplotlib figure and its `1 + len(neighbors)`
        axes.

    Raises:
        ValueError: If `neighbors` is empty or a neighbour has no image.

    Example:

    With `model.single_lookup(x_test[0], k=3)` as the neighbours, or by hand:

    >>> import numpy as np
    >>> from matplotlib import pyplot as plt
    >>> from tensorflow_similarity.types import Lookup
    >>> from tensorflow_similarity.visualization import viz_neighbors_imgs
    >>> neighbours = [Lookup(rank=r, distance=r / 4, label=r % 2, data=np.full((8, 8), r / 3))
    ...               for r in (1, 2, 3)]
    >>> figure, axes = viz_neighbors_imgs(np.zeros((8, 8)), 0, neighbours, show=False)
    >>> [ax.get_title() for ax in axes]
    ['0', '1 - 0.25000', '0 - 0.50000', '1 - 0.75000']
    >>> plt.close(figure)
    """
    if not neighbors:
        raise ValueError("neighbors is empty: pass the Lookups of model.single_lookup(x, k).")
    if any(n.data is None for n in neighbors):
        raise ValueError(
            "A neighbour has no image: index the examples with their images "
            "(model.index(x, y, data=x)) to draw them."
        )
    figure, axes = plt.subplots(1, len(neighbors) + 1, figsize=fig_size, squeeze=False)
    axes = axes[0]
    _draw(axes[0], example, cmap, _class_name(example_class, class_mapping), "black")
    for ax, neighbour in zip(axes[1:], neighbors, strict=True):
        same = neighbour.label == example_class
        title = f"{_class_name(neighbour.label, class_mapping)} - {neighbour.distance:.5f}"
        _draw(ax, neighbour.data, cmap if same else "Reds", title, "black" if same else "red")
    if show:
        plt.show()
    return figure, axes


# 0.17's name, misspelt.
viz_neigbors_imgs = viz_neighbors_imgs


def _draw(ax: Any, image: Any, cmap: str, title: str, color: str) -> None:
    image = np.asarray(image)
    if image.ndim == 3 and image.shape[-1] == 1:
        image = image[..., 0]
    if image.ndim == 3 and image.dtype.kind == "f" and image.max(initial=0.0) > 1.0:
        # imshow clips float RGB to [0, 1]; rescale images given in [0, 255].
        image = image / 255.0
    ax.imshow(image, cmap=cmap)
    ax.set_title(title, color=color)
    ax.set_xticks([])
    ax.set_yticks([])


def _class_name(label: int | None, class_mapping: Mapping[int, str] | None) -> str:
    if label is None:
        return "No Label"
    if class_mapping is None:
        return str(label)
    return str(class_mapping.get(label, label))
