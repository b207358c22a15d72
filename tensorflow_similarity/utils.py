"""0.17's `tensorflow_similarity.utils`: its helper functions, under their 0.17 names.

The package itself works on NumPy arrays (`types.unpack_lookup_labels`,
`types.unpack_lookup_distances`); these functions keep 0.17's arguments and
tensor results for code written against 0.17.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity import types
from tensorflow_similarity._validation import check_int
from tensorflow_similarity.types import FloatTensor, IntTensor, Lookup

# What tf.summary.scalar writes, without needing TensorBoard installed.
_SCALAR = tf.compat.v1.SummaryMetadata(
    plugin_data=tf.compat.v1.SummaryMetadata.PluginData(plugin_name="scalars")
)


def is_tensor_or_variable(x: Any) -> bool:
    """Returns whether `x` is a TensorFlow tensor or variable.

    Keras 3 variables count as variables (under the TensorFlow backend they
    are tensors to `tf.is_tensor`); NumPy arrays and Python numbers do not.

    Args:
        x: Any object.

    Returns:
        `True` for a `tf.Tensor`, `tf.Variable` or `keras.Variable`.

    Example:

    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.utils import is_tensor_or_variable
    >>> is_tensor_or_variable(tf.Variable(1.0)), is_tensor_or_variable(np.ones(2))
    (True, False)
    """
    return bool(tf.is_tensor(x) or isinstance(x, tf.Variable))


def tf_cap_memory() -> None:
    """Makes TensorFlow allocate GPU memory as it needs it instead of all at start.

    Turns on memory growth on every visible GPU; does nothing without a GPU.
    Call it before the first GPU operation: TensorFlow cannot change an
    initialised GPU, and each GPU it refuses is reported with a warning.

    Example:

    >>> from tensorflow_similarity.utils import tf_cap_memory
    >>> tf_cap_memory()
    """
    for gpu in tf.config.experimental.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError as error:
            warnings.warn(
                f"tf_cap_memory could not turn on memory growth for "
                f"{getattr(gpu, 'name', gpu)}: {error}. "
                "Call tf_cap_memory() before any TensorFlow operation runs on the GPU.",
                stacklevel=2,
            )


def unpack_lookup_labels(lookups: Sequence[Sequence[Lookup]], dtype: str | tf.DType) -> IntTensor:
    """Returns the neighbours' labels of each query as a `[num_queries, k]` tensor.

    `k` is the longest lookup set's length; a shorter set is padded with
    `0x7FFFFFFF` (a label no class has), with a warning counting such sets.

    Args:
        lookups: Per query, its `Lookup`s by rank (what `model.lookup` returns).
        dtype: The tensor's dtype, e.g. `"int32"`.

    Returns:
        The labels, row `i` those of query `i`'s neighbours; shape `[0, 0]`
        when `lookups` is empty.

    Raises:
        ValueError: If a neighbour has no label, or a label or the padding
            does not fit an integer `dtype`.

    Example:

    >>> from tensorflow_similarity.types import Lookup
    >>> from tensorflow_similarity.utils import unpack_lookup_labels
    >>> rows = [[Lookup(1, 0.1, label=3), Lookup(2, 0.4, label=5)], [Lookup(1, 0.2, label=7)]]
    >>> unpack_lookup_labels(rows, "int32").numpy().tolist()  # warns: one short set
    [[3, 5], [7, 2147483647]]
    """
    dtype = tf.dtypes.as_dtype(dtype)
    labels = types.unpack_lookup_labels(lookups)
    if dtype.is_integer and labels.size and (labels.min() < dtype.min or labels.max() > dtype.max):
        raise ValueError(
            f"unpack_lookup_labels: the labels (and the padding 0x7FFFFFFF of short lookup "
            f"sets) span [{labels.min()}, {labels.max()}], which {dtype.name} cannot hold. "
            "Pass a wider dtype, e.g. 'int32' or 'int64'."
        )
    _warn_short_sets(lookups, labels.shape[1], "labels", "0x7FFFFFFF")
    return tf.constant(labels.astype(dtype.as_numpy_dtype), dtype=dtype)


def unpack_lookup_distances(
    lookups: Sequence[Sequence[Lookup]],
    dtype: str | tf.DType,
    distance_rounding: int | None = None,
) -> FloatTensor:
    """Returns the neighbours' distances of each query as a `[num_queries, k]` tensor.

    `k` is the longest lookup set's length; a shorter set is padded with
    `inf` (a distance no threshold admits), with a warning counting such sets.
    Rounding is done in `dtype`, as `round(d * 10**r) / 10**r` (halves to
    even), so float32 results are 0.17's to the bit.

    Args:
        lookups: Per query, its `Lookup`s by rank (what `model.lookup` returns).
        dtype: A floating-point dtype, e.g. `"float32"`.
        distance_rounding: Decimals to round the distances to, or `None` to
            keep them. Defaults to `None`.

    Returns:
        The distances, row `i` those of query `i`'s neighbours; shape
        `[0, 0]` when `lookups` is empty.

    Raises:
        ValueError: If `dtype` is not a floating-point dtype or
            `distance_rounding` is neither `None` nor a non-negative integer.

    Example:

    >>> from tensorflow_similarity.types import Lookup
    >>> from tensorflow_similarity.utils import unpack_lookup_distances
    >>> rows = [[Lookup(1, 0.1234, label=3), Lookup(2, 0.5, label=5)]]
    >>> unpack_lookup_distances(rows, "float32", 2).numpy().tolist()
    [[0.11999999731779099, 0.5]]
    """
    dtype = tf.dtypes.as_dtype(dtype)
    if not dtype.is_floating:
        raise ValueError(
            f"unpack_lookup_distances: dtype must be a floating-point dtype such as 'float32'. "
            f"Received {dtype.name}."
        )
    check_int(
        "distance_rounding",
        distance_rounding,
        minimum=0,
        allow_none=True,
        owner="unpack_lookup_distances",
    )
    distances = types.unpack_lookup_distances(lookups)
    _warn_short_sets(lookups, distances.shape[1], "distances", "inf")
    result = tf.constant(distances.astype(dtype.as_numpy_dtype), dtype=dtype)
    if distance_rounding is not None:
        multiplier = tf.constant(10.0**distance_rounding, dtype=dtype)
        result = tf.round(result * multiplier) / multiplier
    return result


def unpack_results(
    results: Mapping[str, Any],
    epoch: int,
    logs: MutableMapping[str, Any],
    tb_writer: tf.summary.SummaryWriter | None,
    name_suffix: str | None = "",
) -> list[str]:
    """Records evaluation results in `logs` and TensorBoard; returns them as text.

    Each metric is stored in `logs` under its name followed by `name_suffix`;
    a NumPy array contributes its first element. With a `tb_writer`, each is
    also written as a TensorBoard scalar at step `epoch`.

    Args:
        results: Metric name to its value (a number, or an array whose first
            element is the value).
        epoch: The step the TensorBoard scalars are written at.
        logs: The mapping updated in place, e.g. a callback's `logs`.
        tb_writer: A `tf.summary` writer, or `None` to write nothing.
        name_suffix: Appended to each metric name; `None` counts as `""`.
            Defaults to `""`.

    Returns:
        One `"name: value"` string per metric, the value with 4 decimals.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.utils import unpack_results
    >>> logs = {}
    >>> unpack_results({"f1": np.array([0.91234])}, 0, logs, None, "_val")
    ['f1_val: 0.9123']
    >>> float(logs["f1_val"])
    0.91234
    """
    suffix = "" if name_suffix is None else str(name_suffix)
    lines = []
    for metric_name, values in results.items():
        value = values[0] if isinstance(values, np.ndarray) else values
        name = f"{metric_name}{suffix}"
        logs[name] = value
        lines.append(f"{name}: {float(value):.4f}")
        if tb_writer is not None:
            with tb_writer.as_default():
                tf.summary.write(name, tf.constant(value, tf.float32), step=epoch, metadata=_SCALAR)
    return lines


def _warn_short_sets(
    lookups: Sequence[Sequence[Lookup]], width: int, what: str, filler: str
) -> None:
    short = sum(1 for row in lookups if len(row) < width)
    if short:
        warnings.warn(
            f"{short} of {len(lookups)} lookup sets are shorter than the longest ({width}); "
            f"their missing {what} are filled with {filler}.",
            stacklevel=3,
        )
