"""The confusion matrix of matched labels, drawn."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib import pyplot as plt


def confusion_matrix(
    y_pred: Any,
    y_true: Any,
    normalize: bool = True,
    labels: Sequence[str] | None = None,
    title: str = "Confusion matrix",
    cmap: str = "Blues",
    show: bool = True,
) -> tuple[Any, np.ndarray]:
    """Draws the confusion matrix of `y_pred` against `y_true`, with accuracy.

    Rows are true classes, columns predicted ones, over the classes
    `0 .. max(y_true, y_pred)`. A `no_match_label` of -1 from `model.match`
    is not a class: such predictions count as wrong and fall outside the
    matrix.

    Args:
        y_pred: Predicted class ids (`model.match(x)`).
        y_true: True class ids.
        normalize: Divide each row by its total (rows of recall). Defaults
            to `True`.
        labels: Class names for the axes, or `None` for the ids.
        title: The plot title. Defaults to `"Confusion matrix"`.
        cmap: The colour map. Defaults to `"Blues"`.
        show: Call `plt.show()`. Defaults to `True`.

    Returns:
        `(axes, matrix)`: the matplotlib axes and the `[classes, classes]`
        float matrix drawn.

    Raises:
        ValueError: If the two do not have the same length, or a label is
            negative other than -1.

    Example:

    With `model.match(x_test)` as the predictions, or by hand: the second
    query of class 1 found no match (-1):

    >>> from matplotlib import pyplot as plt
    >>> from tensorflow_similarity.visualization import confusion_matrix
    >>> ax, cm = confusion_matrix([0, 1, 1, -1], [0, 1, 0, 1], show=False)
    >>> cm
    array([[0.5, 0.5],
           [0. , 0.5]])
    >>> plt.close(ax.figure)
    """
    y_pred = np.asarray(y_pred).astype(np.int64).reshape(-1)
    y_true = np.asarray(y_true).astype(np.int64).reshape(-1)
    if len(y_pred) != len(y_true):
        raise ValueError(
            f"y_pred has {len(y_pred)} labels and y_true {len(y_true)}: pass one prediction "
            "per true label."
        )
    if (y_true < 0).any() or (y_pred < -1).any():
        raise ValueError("Class ids must be >= 0 (and -1 for no match in y_pred).")
    num_classes = int(max(y_true.max(initial=-1), y_pred.max(initial=-1))) + 1
    matrix = np.zeros((num_classes, num_classes))
    for truth, prediction in zip(y_true, y_pred, strict=True):
        if prediction >= 0:
            matrix[truth, prediction] += 1
    accuracy = float(np.mean(y_true == y_pred)) if len(y_true) else 0.0
    if normalize:
        totals = np.bincount(y_true, minlength=num_classes)[:, None].astype(float)
        matrix = np.divide(matrix, totals, out=np.zeros_like(matrix), where=totals > 0)

    figure, ax = plt.subplots(figsize=(8, 6))
    image = ax.imshow(matrix, interpolation="nearest", cmap=cmap)
    ax.set_title(title)
    figure.colorbar(image)
    if labels is not None:
        ticks = np.arange(len(labels))
        ax.set_xticks(ticks, labels, rotation=45)
        ax.set_yticks(ticks, labels)
    threshold = matrix.max(initial=0.0) / (1.5 if normalize else 2.0)
    for i, j in itertools.product(range(num_classes), range(num_classes)):
        value = matrix[i, j]
        text = ("0" if value == 0 else f"{value:.2f}") if normalize else f"{value:.0f}"
        ax.text(
            j, i, text, ha="center", va="center", color="white" if value > threshold else "black"
        )
    ax.set_ylabel("True label")
    ax.set_xlabel(f"Predicted label\naccuracy={accuracy:0.4f}; misclass={1 - accuracy:0.4f}")
    figure.tight_layout()
    if show:
        plt.show()
    return ax, matrix
