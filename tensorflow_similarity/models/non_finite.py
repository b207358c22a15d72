"""What both models' `fit` share against non-finite inputs and weights, and one-class labels."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity.callbacks.stop_on_non_finite import StopOnNonFinite


def nan_unless_finite(loss: tf.Tensor, inputs: Any, weights: Sequence[Any]) -> tf.Tensor:
    """Returns `loss`, or NaN when an input or a weight is not finite.

    A non-finite value does not always reach the loss while it reaches the
    gradients: a max pooling drops NaN (`tf.nn.max_pool2d` returns the
    lowest float for an all-NaN window, and ignores a NaN beside finite
    values), and a batch norm of a constant input returns its finite
    offset. Checking the step's inputs and the weights it starts from makes
    the reported loss NaN whenever they are not finite, whatever the layers
    in between. The NaN factor is multiplied in, not selected, so the
    gradients stay what they were.

    Args:
        loss: The scalar loss of the step.
        inputs: The step's inputs (a tensor or a nest of them); only floating
            ones are checked.
        weights: The variables whose values to check (the model's weights,
            before this step updates them).

    Returns:
        `loss`, times NaN when something was not finite, in `loss`'s dtype.
    """
    checks = [
        tf.reduce_all(tf.math.is_finite(tensor))
        for tensor in tf.nest.flatten(inputs)
        if tensor is not None and tf.as_dtype(tensor.dtype).is_floating
    ]
    checks += [
        tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(weight)))
        for weight in weights
        if tf.as_dtype(weight.dtype).is_floating
    ]
    if not checks:
        return loss
    finite = tf.reduce_all(tf.stack(checks))
    # The NaN takes the loss's dtype: float64 under a float64 floatx or loss
    # dtype, float16 or bfloat16 when a loss returns those.
    nan = tf.fill(tf.shape(loss), tf.constant(np.nan, dtype=loss.dtype))
    return loss * tf.where(finite, tf.ones_like(loss), nan)


def with_stop_on_non_finite(callbacks: Any, stop_on_non_finite: bool) -> Any:
    """`callbacks` with a `StopOnNonFinite` first, unless off or one is there already.

    Raises:
        TypeError: When `stop_on_non_finite` is not a bool.
    """
    if not isinstance(stop_on_non_finite, (bool, np.bool_)):
        raise TypeError(f"stop_on_non_finite must be True or False, got {stop_on_non_finite!r}.")
    if not stop_on_non_finite:
        return callbacks
    if isinstance(callbacks, keras.callbacks.CallbackList):
        return callbacks
    given = list(callbacks or [])
    if any(isinstance(callback, StopOnNonFinite) for callback in given):
        return given
    return [StopOnNonFinite(), *given]


def fit_arguments(
    args: Sequence[Any], position: int, callbacks: Any, stop_on_non_finite: bool
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """`keras.Model.fit`'s positional and keyword arguments, `StopOnNonFinite` added.

    Args:
        args: The positional arguments after those the caller names itself.
        position: Where `callbacks` falls in `args`, as in Keras' signature.
        callbacks: The `callbacks` keyword.
        stop_on_non_finite: See `with_stop_on_non_finite`.

    Returns:
        `(args, keywords)`: `callbacks` stays where it was given.

    Raises:
        TypeError: When `callbacks` is given both ways, or for a bad
            `stop_on_non_finite`.
    """
    if len(args) > position:
        if callbacks is not None:
            raise TypeError("fit() got multiple values for argument 'callbacks'.")
        args = list(args)
        args[position] = with_stop_on_non_finite(args[position], stop_on_non_finite)
        return tuple(args), {}
    return tuple(args), {"callbacks": with_stop_on_non_finite(callbacks, stop_on_non_finite)}


def warn_if_one_class(y: Any) -> None:
    """Warns when labels given as an array or tensor hold a single class.

    A metric loss compares examples of different classes: with one class it
    has no negatives and is 0 (or constant) whatever the embeddings, so
    training does nothing. Only labels given directly are checked, on the
    host before training; labels in a dataset are not read ahead.
    """
    if y is None or isinstance(y, (tf.data.Dataset, dict, list, tuple)):
        return
    if not isinstance(y, (np.ndarray, tf.Tensor)) and not hasattr(y, "__array__"):
        return
    labels = np.asarray(y)
    if labels.size and np.unique(labels).size == 1:
        warnings.warn(
            f"Every label passed to fit is {labels.flat[0]!r}: a metric loss needs at least "
            "two classes in a batch (it has no negative pairs otherwise, and its loss is 0 "
            "or constant whatever the model learns). Pass labels of several classes, e.g. "
            "batches from a sampler such as MultiShotMemorySampler.",
            UserWarning,
            stacklevel=3,
        )
