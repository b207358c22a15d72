"""Walking a model's layers: every layer once, and whether a rebuild can reach it.

`walk_layers` visits a model's layers, nested models and the layers held by
subclassed layers included, with each one's path; `find_layers` picks some and
says which a rebuild (`rebuild.rebuild_model`) cannot reach.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import keras


class LayerPath(NamedTuple):
    """A layer found by `walk_layers`.

    Attributes:
        path: The layer's path from the model, e.g. `"model/block/bn"`.
        layer: The layer.
        in_graph: Whether a rebuild reaches it: true for the layers of
            Functional and Sequential models (recursively), false for anything
            held by a subclassed layer or model.
    """

    path: str
    layer: keras.layers.Layer
    in_graph: bool


def walk_layers(
    layer: keras.layers.Layer,
    path: str | None = None,
    in_graph: bool = True,
    seen: set[int] | None = None,
) -> Iterator[LayerPath]:
    """Yields `layer` and everything it contains, once each, depth first.

    Args:
        layer: A layer or model.
        path: The path of `layer`; defaults to its name.
        in_graph: Whether `layer` itself is reachable by a rebuild.
        seen: Ids of layers already visited (internal).

    Yields:
        A `LayerPath` for `layer`, then for every layer inside it.
    """
    seen = set() if seen is None else seen
    if id(layer) in seen:
        return
    seen.add(id(layer))
    path = layer.name if path is None else path
    yield LayerPath(path, layer, in_graph)
    if is_graph_model(layer):
        children, children_in_graph = layer.layers, in_graph
    else:
        children, children_in_graph = _attribute_layers(layer), False
    for child in children:
        yield from walk_layers(child, f"{path}/{child.name}", children_in_graph, seen)


def all_layers(model: keras.layers.Layer) -> list[keras.layers.Layer]:
    """Returns every layer inside `model` (nested models and their layers), depth first.

    Args:
        model: A Keras model (or layer).

    Returns:
        The layers `walk_layers` finds, `model` itself left out.
    """
    return [found.layer for found in walk_layers(model)][1:]


def find_layers(
    model: keras.Model,
    select: Callable[[keras.layers.Layer], bool],
    *,
    function: str,
    kind: str,
    remedy: str,
) -> list[LayerPath]:
    """Returns the layers of `model` that `select` picks, all of them reachable by a rebuild.

    Args:
        model: A Functional or Sequential model.
        select: Predicate on each layer.
        function: The public caller's name, for the message.
        kind: What the selected layers are, for the message.
        remedy: What the user can do about an unreachable layer.

    Returns:
        The selected layers with their paths, in `walk_layers` order.

    Raises:
        ValueError: If a selected layer sits inside a subclassed layer or
            model, where a rebuild cannot reach it (it would be left
            unchanged); the message names every such layer by path.
    """
    found = [item for item in walk_layers(model) if select(item.layer)]
    unreachable = [item.path for item in found if not item.in_graph]
    if unreachable:
        listed = ", ".join(repr(path) for path in unreachable)
        raise ValueError(
            f"{function} cannot reach the {kind}(s) {listed}: they are inside a subclassed "
            "layer or model, whose structure Keras cannot rebuild, and they would be left "
            f"unchanged. {remedy}"
        )
    return found


def _attribute_layers(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The layers a layer holds in its attributes, directly or in lists, tuples, sets, dicts."""
    found: list[keras.layers.Layer] = []
    seen: set[int] = set()

    def collect(value: Any) -> None:
        if id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, keras.layers.Layer):
            found.append(value)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                collect(item)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)

    for value in vars(layer).values():
        collect(value)
    return found


def is_graph_model(layer: keras.layers.Layer) -> bool:
    """Whether `layer` is rebuilt layer by layer, as `keras.models.clone_model` can."""
    return isinstance(layer, (keras.Sequential, _functional_class()))


@functools.cache
def _functional_class() -> type:
    # Keras does not export its Functional class; a minimal functional model is
    # an instance of it. Explicit names keep Keras' automatic name counters as
    # they are.
    probe = keras.Input(shape=(1,), name="functional_probe_input")
    return type(keras.Model(probe, probe, name="functional_probe"))
