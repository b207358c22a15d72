"""The `Indexer`'s argument checks: labels, embeddings and the components it is built from."""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.search import Search


def as_label(label: Any) -> int | None:
    """`label` as a plain int (or `None`): an int, a NumPy integer, or one in a 1-element array
    or tensor (0.17's `index_single(x, y=tf.constant([1]))`).

    Refused as `batch_add` refuses them: anything of another dtype than an
    integer one, so a float (`1.9`, or `2.0`), a bool and a string (`"7"`),
    which would otherwise be stored as another class than the one meant.

    Raises:
        ValueError: If `label` holds more than one value, or is not an
            integer.
    """
    if label is None:
        return None
    array = np.asarray(label)
    if array.size != 1:
        raise ValueError(f"A label is one integer (or None); got {array.size} values: {label!r}.")
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"label must be an integer (a class id) or None; got {label!r} of dtype "
            f"{array.dtype}. Pass an int or a NumPy integer."
        )
    # Plain ints: NumPy scalars in Lookups slow every comparison down the line.
    return int(array.reshape(()))


def check_labels(labels: Any, num: int, name: str) -> np.ndarray:
    """`labels` as a 1-D integer array of `num` labels.

    Raises:
        ValueError: If `labels` is not one integer per example.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != num:
        raise ValueError(
            f"Got {name} of shape {labels.shape} for {num} examples. Pass one integer "
            "label per example."
        )
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name} must be integers (class ids); got dtype {labels.dtype}.")
    return labels


def check_embeddings(
    predictions: Any, embedding_size: int, embedding_output: int | None, single: bool = False
) -> np.ndarray:
    """A model's predictions as `[n, embedding_size]` float embeddings (`[1, ...]` if `single`).

    Args:
        predictions: The predictions; of a multi-output model, a list or tuple
            whose item `embedding_output` holds the embeddings.
        embedding_size: The dimension the embeddings must have.
        embedding_output: Which output holds the embeddings, or `None`.
        single: Whether one embedding is expected (a `[dim]` one is accepted).

    Raises:
        ValueError: If the embeddings are not of that shape.
    """
    if isinstance(embedding_output, int) and isinstance(predictions, (list, tuple)):
        predictions = predictions[embedding_output]
    embeddings = np.asarray(predictions)
    if single and embeddings.ndim == 1:
        embeddings = embeddings[None]
    if embeddings.ndim != 2 or embeddings.shape[1] != embedding_size:
        wanted = f"[{embedding_size}]" if single else f"[n, {embedding_size}]"
        raise ValueError(
            f"Expected embeddings of shape {wanted}, got {embeddings.shape}. Pass the "
            f"outputs of the model the index was created for (size "
            f"{embedding_size})."
        )
    if single and len(embeddings) != 1:
        raise ValueError(
            f"Expected one embedding, got {len(embeddings)}. Use batch_add/batch_lookup "
            "for several."
        )
    if not np.issubdtype(embeddings.dtype, np.floating):
        embeddings = embeddings.astype(np.float32)
    return embeddings


def check_component(name: str, value: Any, base: type, names: tuple[str, ...]) -> None:
    """Raises unless `value` is an instance of `base` or one of the `names`."""
    if isinstance(value, base) or (isinstance(value, str) and value in names):
        return
    raise ValueError(
        f"Indexer: {name} must be one of {names} or a {base.__name__} instance. "
        f"Received: {name}={value!r}."
    )


def check_search(search: Search, distance: Distance, dim: int) -> None:
    """Raises unless `search` was built for `distance` and embeddings of size `dim`."""
    search_distance = getattr(search, "distance", None)
    if (
        search_distance is not None
        and distance_canonicalizer(search_distance).name != distance.name
    ):
        raise ValueError(
            f"The search {search!r} uses distance {distance_canonicalizer(search_distance).name!r} "
            f"but the index {distance.name!r}. Build the search with distance={distance.name!r}."
        )
    search_dim = getattr(search, "dim", None)
    if search_dim is not None and search_dim != dim:
        raise ValueError(
            f"The search {search!r} is for embeddings of size {search_dim} but the index "
            f"for size {dim}. Build the search with dim={dim}."
        )
