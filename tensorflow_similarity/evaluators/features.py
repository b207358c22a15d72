"""Features of inputs from an embedding network: the one extraction the probes and kNN share.

`KNNAccuracy`, `OnlineLinearProbe` and `linear_probe` each run a network
over labelled inputs and need its outputs as a `[num, dim]` array, one row
per input. They take the same inputs: a Keras model (run with `predict`, in
inference mode) or any callable, over `(x, y)` arrays or a
`tf.data.Dataset` of `(x, y)` batches, where `x` may be a nested structure
(a dict or tuple of arrays, as a multi-input model takes).
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

__all__ = ["embed_inputs", "labelled_features"]


def embed_inputs(embed: Any, x: Any, batch_size: int, owner: str) -> np.ndarray:
    """The outputs of `embed` on `x` as a `[num, dim]` array, one row per input.

    A Keras model runs with `predict` (inference mode); a callable runs on
    slices of `batch_size` inputs, each array of a nested `x` sliced alike.
    Outputs with more than two axes are flattened per row.

    Args:
        embed: A Keras model, or a callable from a batch of inputs to one
            tensor `[batch, ...]`.
        x: The inputs: an array, or a nested structure (dict, tuple, list)
            of arrays of one length.
        batch_size: Inputs per call of a callable (and per `predict` batch).
        owner: The name errors start with (the caller's).

    Returns:
        A NumPy array `[num, dim]` in the outputs' dtype.

    Raises:
        ValueError: If the network returns a structure instead of one
            tensor, or not one row per input.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.evaluators.features import embed_inputs
    >>> x = {"a": np.ones((5, 2)), "b": np.zeros((5, 1))}
    >>> embed_inputs(lambda d: d["a"] * 2, x, batch_size=2, owner="demo").shape
    (5, 2)
    """
    total = _length(x, owner)
    if isinstance(embed, keras.Model):
        return _rows(embed.predict(x, batch_size=batch_size, verbose=0), total, owner)
    batches = []
    for start in range(0, total, batch_size):
        end = min(start + batch_size, total)
        batch = keras.tree.map_structure(lambda a, s=start, e=end: a[s:e], x)
        batches.append(_rows(embed(batch), end - start, owner))
    if not batches:
        return np.zeros((0, 0))
    return np.concatenate(batches)


def labelled_features(
    embed: Any, data: Any, batch_size: int, owner: str
) -> tuple[np.ndarray, np.ndarray]:
    """`(features, labels)` of `(x, y)` arrays or a dataset of `(x, y)` batches.

    Args:
        embed: A Keras model or a callable (see `embed_inputs`).
        data: `(x, y)`, or a `tf.data.Dataset` of `(x, y)` batches; `y`
            integer labels `[num]` or `[num, 1]`.
        batch_size: Inputs per call for arrays (a dataset keeps its batches).
        owner: The name errors start with.

    Returns:
        Features `[num, dim]` in the network's dtype and labels `[num]`.

    Raises:
        ValueError: As `embed_inputs`.
    """
    if isinstance(data, tf.data.Dataset):
        features, labels = [], []
        for x, y in data:
            y = np.asarray(y)
            if isinstance(embed, keras.Model):
                outputs = embed.predict_on_batch(x)
            else:
                outputs = embed(x)
            features.append(_rows(outputs, len(y), owner))
            labels.append(y.reshape(len(y), -1)[:, 0] if y.ndim > 1 else y)
        return np.concatenate(features), np.concatenate(labels)
    x, y = data
    y = np.asarray(keras.ops.convert_to_numpy(y))
    labels = y.reshape(len(y), -1)[:, 0] if y.ndim > 1 else y
    return embed_inputs(embed, x, batch_size, owner), labels


def _rows(outputs: Any, expected: int, owner: str) -> np.ndarray:
    if isinstance(outputs, (dict, list, tuple)):
        raise ValueError(
            f"{owner}: the embedding network must return one tensor [batch, ...]; it returned "
            f"a {type(outputs).__name__}. Pass an embedding_fn (or backbone) that returns the "
            "features alone."
        )
    array = np.asarray(keras.ops.convert_to_numpy(outputs))
    if array.ndim < 2 or len(array) != expected:
        raise ValueError(
            f"{owner}: the embedding network must return [batch, ...] features, one row per "
            f"input ({expected} here). Received shape {array.shape}."
        )
    return array.reshape(len(array), -1)


def _length(x: Any, owner: str) -> int:
    lengths = {len(a) for a in keras.tree.flatten(x)}
    if len(lengths) != 1:
        raise ValueError(
            f"{owner}: every input array must have the same number of examples. Received "
            f"lengths {sorted(lengths)}."
        )
    return lengths.pop()
