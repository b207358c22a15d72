"""Graph surgery for Functional and Sequential models, knowing nothing of batch norm.

`rebuild_model` rebuilds a model with some layers (found with
`layer_walk.find_layers`) replaced, copying or sharing the others. The sync-BN plugin
(`plugin.py`) decides which layers to replace and with what; everything
about cloning graphs, keeping weights, names and flags lives here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.layer_walk import LayerPath, is_graph_model, walk_layers


def rebuild_model(
    model: keras.Model,
    targets: list[LayerPath],
    replace: Callable[[keras.layers.Layer], keras.layers.Layer],
    *,
    function: str,
    share_layers: bool = False,
) -> keras.Model:
    """Rebuilds `model` with each target layer replaced by `replace(layer)`.

    Every Functional or Sequential model, the outer one and those nested in it
    at any depth, is rebuilt with `keras.models.clone_model`, so shared
    layers, several inputs and outputs and skip connections keep their
    structure, and layer names, `trainable` flags and dtype policies are kept.
    Without `share_layers`, every other layer is rebuilt from its config with
    its variables created from the original's values (else `set_weights` and
    `finalize_state`), and the result shares nothing with `model`. With
    `share_layers`, every other layer is reused with its variables, only the
    replacements are new, and nested models holding no target are shared
    whole. The replacements are created (and may fail) before anything is
    cloned.

    Args:
        model: A Functional or Sequential model.
        targets: The layers to replace, from `find_layers`.
        replace: Returns the new layer for a target; its `TypeError` or
            `ValueError` is reported with the layer's path.
        function: The public caller's name, for messages.
        share_layers: Whether layers other than the targets are reused.

    Returns:
        The rebuilt model.

    Raises:
        ValueError: If a replacement cannot be created, a layer cannot be
            rebuilt from its config, or (with `share_layers`) a variable to
            share was created under another distribution strategy.
    """
    paths: dict[int, str] = {}
    # Taken before anything is rebuilt: with shared layers, setting a rebuilt
    # model's `trainable` also overwrites the flags of the layers it shares.
    flags: dict[int, bool] = {}
    for item in walk_layers(model):
        paths[id(item.layer)] = item.path
        flags[id(item.layer)] = item.layer.trainable
    if share_layers:
        check_shareable(model, [item.layer for item in targets], function)

    replacements: dict[int, keras.layers.Layer] = {}
    for item in targets:
        try:
            replacements[id(item.layer)] = replace(item.layer)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{function} cannot replace layer {item.path!r} "
                f"({type(item.layer).__name__}): {error}"
            ) from error

    holds_replacement: dict[int, bool] = {}

    def must_rebuild(graph_model: keras.Model) -> bool:
        if id(graph_model) not in holds_replacement:
            holds_replacement[id(graph_model)] = any(
                id(child) in replacements or (is_graph_model(child) and must_rebuild(child))
                for child in graph_model.layers
            )
        return holds_replacement[id(graph_model)]

    clones: dict[int, keras.layers.Layer] = {}
    copied: set[int] = set()

    def clone_layer(layer: keras.layers.Layer) -> keras.layers.Layer:
        # One cache for every nesting level keeps a layer shared between a
        # sub-model and its parent shared in the copy.
        if id(layer) not in clones:
            if is_graph_model(layer) and (not share_layers or must_rebuild(layer)):
                clones[id(layer)] = _clone_graph_model(layer, clone_layer)
            elif share_layers and id(layer) not in replacements:
                clones[id(layer)] = layer
            else:
                if id(layer) in replacements:
                    clone = replacements[id(layer)]
                else:
                    clone = _clone_from_config(layer, paths, function)
                # A bare operation in the graph (keras-hub's ResNetV2 calls
                # `keras.ops.pad`) is no layer: it holds no state to copy.
                if isinstance(layer, keras.layers.Layer) and _build_as_copy(layer, clone):
                    copied.add(id(clone))
                clones[id(layer)] = clone
        return clones[id(layer)]

    new_model = clone_layer(model)
    _copy_state(model, new_model, model.name, flags, copied)
    return new_model


def _build_as_copy(old: keras.layers.Layer, new: keras.layers.Layer) -> bool:
    """Builds `new` as `old` is built, its variables created from `old`'s values.

    The variables would otherwise be created from their initializers (a
    random draw for every kernel) only to be overwritten by the copy, which
    roughly doubles the cost of creating them. Each variable `new` creates
    starts from the value of `old`'s variable of the same name and dtype.

    Returns:
        Whether every variable of `old` was copied so, once, into a variable
        of the same shape: then the weights need no other copy. When not
        (a layer never built, a variable created outside `build`, names
        repeated within the layer), the caller copies them with
        `set_weights`, which overwrites whatever was created here.
    """
    build_config = old.get_build_config() if old.built and not new.built else None
    sources = {variable.name: variable for variable in old.weights}
    if not build_config or not sources or len(sources) != len(old.weights):
        return False
    used: list[str] = []

    def creator(next_creator: Callable[..., Any], **kwargs: Any) -> Any:
        source = sources.get(kwargs.get("name"))
        dtype = kwargs.get("dtype")
        if source is not None and dtype is not None and tf.as_dtype(dtype) == source.dtype:
            kwargs["initial_value"] = lambda: tf.convert_to_tensor(source.value)
            used.append(source.name)
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator):
        new.build_from_config(build_config)
    return (
        sorted(used) == sorted(sources)
        and len(new.weights) == len(old.weights)
        and all(
            tuple(a.shape) == tuple(b.shape) for a, b in zip(old.weights, new.weights, strict=True)
        )
    )


def check_shareable(
    model: keras.Model, replaced_layers: list[keras.layers.Layer], function: str
) -> None:
    """Raises if the variables to share do not belong to the current distribution strategy.

    A layer is reused with its variables as they are: one created outside the
    strategy's scope would not be mirrored, and the result would mix
    per-replica and single-device variables. For `convert_sync_batchnorm` and
    the builders that call it with `share_layers=True`, before any work.

    Args:
        model: The model whose layers are to be shared.
        replaced_layers: The layers that will be replaced rather than shared;
            their variables are not checked.
        function: The caller's name, for the message.

    Raises:
        ValueError: If a variable to share was created under another
            distribution strategy than the current one.
    """
    strategy = tf.distribute.get_strategy()
    replaced = {id(variable) for layer in replaced_layers for variable in layer.weights}
    foreign = [
        variable.path
        for variable in model.weights
        if id(variable) not in replaced
        and not strategy.extended.variable_created_in_scope(variable.value)
    ]
    if foreign:
        raise ValueError(
            f"{function}(share_layers=True) reuses the variables of model {model.name!r}, but "
            f"{len(foreign)} of them (e.g. {foreign[0]!r}) were created under another "
            f"distribution strategy than the current one ({type(strategy).__name__}). Build "
            f"the model inside the same strategy.scope() as the call to {function}, or pass "
            "share_layers=False to convert a copy."
        )


def _clone_graph_model(
    model: keras.Model, clone_layer: Callable[[keras.layers.Layer], keras.layers.Layer]
) -> keras.Model:
    """Rebuilds a Functional or Sequential model with `clone_layer` applied to its layers.

    Nested models reach `clone_layer` too (not `clone_model`'s own recursion),
    so they share its cache and their inputs keep their names: `clone_model`
    names the inputs it creates after tensors, not after the input layers.
    """
    input_tensors = None
    if not isinstance(model, keras.Sequential):
        input_layers = {
            id(layer.output): layer
            for layer in model.layers
            if isinstance(layer, keras.layers.InputLayer)
        }

        def new_input(tensor: keras.KerasTensor) -> keras.KerasTensor:
            layer = input_layers[id(tensor)]
            return type(layer).from_config(layer.get_config()).output

        input_tensors = keras.tree.map_structure(new_input, model.input)
    return keras.models.clone_model(model, input_tensors=input_tensors, clone_function=clone_layer)


def _clone_from_config(
    layer: keras.layers.Layer, paths: dict[int, str], function: str
) -> keras.layers.Layer:
    try:
        return type(layer).from_config(layer.get_config())
    except Exception as error:
        raise ValueError(
            f"{function} cannot rebuild layer {paths.get(id(layer), layer.name)!r} "
            f"({type(layer).__name__}) from its config: {error}. Give the layer a "
            "get_config() that returns all its constructor arguments."
        ) from error


def _copy_state(
    old: keras.layers.Layer,
    new: keras.layers.Layer,
    path: str,
    flags: dict[int, bool],
    copied: set[int],
) -> None:
    """Copies weights and `trainable` flags from `old` to its rebuilt copy `new`.

    Parents go first: setting a model's `trainable` also sets its layers',
    which are then given their own original flags (`flags`, by layer id). A
    layer shared rather than copied (`new is old`) keeps its weights; its
    flags, and those of the layers it holds, are set back. Layers in `copied`
    (ids) were built from their weights already (`_build_as_copy`).
    """
    if new is old:
        for _, layer, _ in walk_layers(old):
            layer.trainable = flags[id(layer)]
        return
    new.trainable = flags[id(old)]
    if not is_graph_model(old):
        if id(new) not in copied:
            new.set_weights(old.get_weights())
            # Keras' preprocessing layers (Normalization, Discretization, the
            # lookups) keep state derived from their variables, which
            # set_weights leaves as built; weight loading refreshes it so.
            finalize_state = getattr(new, "finalize_state", None)
            if callable(finalize_state):
                finalize_state()
        return
    # clone_model gives a rebuilt model the global policy of the moment. A
    # quantized policy is left alone: assigning one would quantize the copy.
    if old.dtype_policy.quantization_mode is None:
        new.dtype_policy = old.dtype_policy
    old_layers, new_layers = old.layers, new.layers
    old_names = [x.name for x in old_layers]
    if old_names != [x.name for x in new_layers]:
        raise RuntimeError(
            f"The rebuilt copy of {path!r} does not list the same layers as the original "
            f"({old_names} vs {[x.name for x in new_layers]}); weights cannot be matched. "
            "Please report this with the model's summary()."
        )
    for old_layer, new_layer in zip(old_layers, new_layers, strict=True):
        _copy_state(old_layer, new_layer, f"{path}/{old_layer.name}", flags, copied)
