"""The augmented views of each image, side by side, in a grid."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib import pyplot as plt

from tensorflow_similarity._validation import check_int, check_number


def visualize_views(
    views: Sequence[Any],
    labels: Any = None,
    predictions: Any = None,
    num_imgs: int | None = None,
    views_per_col: int = 4,
    fig_size: tuple[float, float] = (24, 4),
    max_pixel_value: float = 1.0,
    min_pixel_value: float = 0.0,
    *,
    show: bool = True,
) -> tuple[Any, np.ndarray]:
    """Draws each image's views side by side, `views_per_col` images to a row.

    `views[j][i]` is view `j` of image `i` (what an augmenter returns: a list
    of `[batch, height, width, channels]` batches). Image `i`'s panel is its
    views concatenated along the width, rescaled from
    `[min_pixel_value, max_pixel_value]` to `[0, 1]` (and clipped there). A
    panel is titled `"Label: <label> | Pred: <prediction>"` when
    `predictions` are given (the label is the image's index without
    `labels`), `"Label: <label>"` when only `labels` are, and not at all
    otherwise.

    Args:
        views: The views, a sequence of batches of the same images.
        labels: `None` or one label per image. Defaults to `None`.
        predictions: `None` or one prediction per image (a number, or a
            vector whose first value is shown). Defaults to `None`.
        num_imgs: Number of images to draw, the first ones; `None` for all.
            Defaults to `None`.
        views_per_col: Number of image panels per row of the grid. Defaults
            to 4.
        fig_size: The figure size in inches. Defaults to `(24, 4)`.
        max_pixel_value: The pixel value drawn white. Defaults to 1.0.
        min_pixel_value: The pixel value drawn black. Defaults to 0.0.
        show: Call `plt.show()` (keyword only). Defaults to `True`.

    Returns:
        `(figure, axes)`: the matplotlib figure and its `[rows, views_per_col]`
        array of axes (those past the last image are switched off).

    Raises:
        ValueError: If `views` is empty or its batches differ in length,
            `num_imgs` exceeds the number of images, `labels` or
            `predictions` are fewer than the images drawn, a count is not a
            positive integer, or the two pixel values are equal.

    Example:

    With an augmenter's views (`augmenter(images, None, 2, False)`), or two
    plain ones of four images:

    >>> import numpy as np
    >>> from matplotlib import pyplot as plt
    >>> from tensorflow_similarity.visualization import visualize_views
    >>> views = [np.zeros((4, 8, 8, 3)), np.ones((4, 8, 8, 3))]
    >>> figure, axes = visualize_views(views, labels=[0, 1, 2, 3], show=False)
    >>> axes.shape, axes[0, 0].get_title()
    ((1, 4), 'Label: 0')
    >>> plt.close(figure)
    """
    if len(views) == 0:
        raise ValueError("visualize_views: views is empty; pass the list of augmented batches.")
    lengths = [len(view) for view in views]
    if len(set(lengths)) != 1:
        raise ValueError(
            "visualize_views: every view must hold the same images; the batches have "
            f"lengths {lengths}."
        )
    available = lengths[0]
    check_int("num_imgs", num_imgs, minimum=1, allow_none=True, owner="visualize_views")
    check_int("views_per_col", views_per_col, minimum=1, owner="visualize_views")
    check_number("max_pixel_value", max_pixel_value, owner="visualize_views")
    check_number("min_pixel_value", min_pixel_value, owner="visualize_views")
    num_imgs = available if num_imgs is None else num_imgs
    if num_imgs > available:
        raise ValueError(
            f"visualize_views: num_imgs={num_imgs} exceeds the {available} images in each view."
        )
    for name, values in (("labels", labels), ("predictions", predictions)):
        if values is not None and len(values) < num_imgs:
            raise ValueError(
                f"visualize_views: {name} holds {len(values)} entries for {num_imgs} images."
            )
    scale = abs(max_pixel_value - min_pixel_value)
    if scale == 0:
        raise ValueError(
            "visualize_views: max_pixel_value and min_pixel_value are equal "
            f"({max_pixel_value}); pass the range the pixels span."
        )

    # Tensors, lists and arrays alike; a tensor's element would print as "tf.Tensor(...)".
    labels = None if labels is None else np.asarray(labels)
    predictions = None if predictions is None else np.asarray(predictions)
    rows = math.ceil(num_imgs / views_per_col)
    figure, axes = plt.subplots(rows, views_per_col, figsize=fig_size, squeeze=False)
    for i, ax in enumerate(axes.flat):
        ax.set_axis_off()
        if i >= num_imgs:
            continue
        panel = np.concatenate([np.asarray(view[i], dtype=np.float64) for view in views], axis=1)
        panel = np.clip((panel - min_pixel_value) / scale, 0.0, 1.0)
        if panel.ndim == 3 and panel.shape[-1] == 1:
            panel = panel[..., 0]
        ax.imshow(panel, cmap="gray" if panel.ndim == 2 else None, vmin=0.0, vmax=1.0)
        label = labels[i] if labels is not None else i
        if predictions is not None:
            prediction = float(predictions[i].reshape(-1)[0])
            ax.set_title(f"Label: {label} | Pred: {prediction:.5f}")
        elif labels is not None:
            ax.set_title(f"Label: {label}")
    if show:
        plt.show()
    return figure, axes
