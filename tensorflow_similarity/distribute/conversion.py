"""Rebuilds a model with its batch-norm layers synchronised, or plain again."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization


def convert_sync_batchnorm(
    model: keras.Model,
    plugin: SyncBatchNormPlugin | None = None,
    *,
    share_layers: bool = False,
) -> keras.Model:
    """Returns a copy of `model` whose batch-norm layers are synchronised.

    Every layer the plugin's `should_convert` selects (by default each
    `keras.layers.BatchNormalization` that is not yet synchronised) is replaced
    by `plugin.create_layer(**layer.get_config())`; every other layer is
    rebuilt from its config. Each Functional or Sequential model, the outer one
    and those nested in it at any depth, is rebuilt with
    `keras.models.clone_model`, so shared layers, several inputs and outputs
    and skip connections keep their structure. Every weight (gamma, beta,
    moving statistics and all other layers' weights) is copied from the
    original: each new layer is built with its variables created from the
    original's values, rather than from initializers whose draws would be
    overwritten, or else gets `set_weights` and, as weight loading does,
    `finalize_state`. So in inference the copy computes exactly what the
    original does, or, for an original whose variables were assigned without
    `finalize_state`, what the original computes once saved and reloaded
    (`keras.layers.Normalization` derives tensors from its variables then).

    The copy keeps layer names, `trainable` flags (of layers and of nested
    models), dtype policies and every batch-norm argument (`axis`, `momentum`,
    `epsilon`, `center`, `scale`, initializers, regularizers, ...). It shares
    no layer and no variable with `model`, which is left untouched. Call it
    inside `strategy.scope()` to create the copy's variables under that
    strategy (mirrored). A compiled model's copy is compiled again from its
    compile config, with a fresh optimizer.

    A Functional subclass whose constructor is not `(inputs, outputs, name)`
    (a keras-cv backbone, for example) comes back as a plain Functional model
    with the same graph, layers and weights: its class cannot be rebuilt from
    a graph, and `clone_model` falls back to `keras.Model(inputs, outputs)`.

    With `share_layers=True` the copy is not a copy: it reuses every layer
    the plugin does not select, with its variables, and only the new
    batch-norm layers are created (their weights copied) and the graph
    rewired. Nothing is rebuilt from config and no other variable is created
    or copied, which makes the conversion several times cheaper. It is meant
    for a model the result replaces: the temporary a builder makes and
    converts, or a backbone the result is built on (`BackboneSim` does so by
    default). The original still computes what it did (it keeps its own
    plain batch-norm layers), but it shares every other layer with the
    result: training or freezing one trains or freezes the other. Its
    variables must belong to the distribution strategy of the call (build it
    in the same `strategy.scope()`, or outside any), since the result uses
    them as they are. Nested models with nothing to convert are shared
    whole.

    Nothing to convert is not an error: `model` itself is returned, with a
    warning.

    Args:
        model: A Functional or Sequential `keras.Model`.
        plugin: The `SyncBatchNormPlugin` that decides which layers to replace
            and creates their replacements. Defaults to `None`, meaning
            `SyncBatchNormPlugin()` (all replicas in one sync group).
        share_layers: Whether the result reuses the layers and variables of
            `model` that are not converted, instead of copies. Defaults to
            `False`: the result shares nothing with `model`.

    Returns:
        The converted copy of `model`, or `model` itself when the plugin selects
        no layer.

    Raises:
        TypeError: If `model` is not a `keras.Model`, `plugin` is not a
            `SyncBatchNormPlugin` or `share_layers` is not a bool.
        ValueError: If a selected layer sits inside a subclassed layer or model
            (the rebuild cannot reach it), or if the plugin cannot create its
            replacement (for example `renorm=True`), or if a layer cannot be
            rebuilt from its config. The message names the layers by path.
            With `share_layers=True`, also if variables of `model` were
            created under another distribution strategy than the current one.

    Example:

    >>> import tensorflow as tf
    >>> model = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    >>> strategy = tf.distribute.MirroredStrategy()
    >>> with strategy.scope():
    ...     synced = convert_sync_batchnorm(model)

    A builder that owns its temporary converts it in place of copying it:

    >>> with strategy.scope():
    ...     temporary = keras.applications.MobileNetV2(weights=None, input_shape=(32, 32, 3))
    ...     synced = convert_sync_batchnorm(temporary, share_layers=True)
    """
    _check_model(model, "convert_sync_batchnorm")
    if not isinstance(share_layers, bool):
        raise TypeError(
            "convert_sync_batchnorm expects share_layers=True or False. Received: "
            f"{share_layers!r} of type {type(share_layers).__name__}."
        )
    if plugin is None:
        plugin = SyncBatchNormPlugin()
    elif not isinstance(plugin, SyncBatchNormPlugin):
        raise TypeError(
            "convert_sync_batchnorm expects plugin=None (the default SyncBatchNormPlugin()) "
            "or a SyncBatchNormPlugin instance such as GroupSyncBatchNorm(2). Received: "
            f"{plugin!r} of type {type(plugin).__name__}. To turn a sync_bn flag into a "
            "plugin, use resolve_sync_bn(sync_bn)."
        )

    return _rebuild(
        model,
        select=plugin.should_convert,
        replace=lambda layer: plugin.create_layer(**_layer_kwargs(layer)),
        function="convert_sync_batchnorm",
        kind="batch-norm layer selected by the plugin",
        remedy=(
            "Create the synchronised layer in that layer's own code instead "
            "(SyncBatchNormalization(...), or plugin.create_layer(...) to follow the plugin), "
            "or build the block with the Functional API so it can be rebuilt."
        ),
        share_layers=share_layers,
    )


def revert_sync_batchnorm(model: keras.Model) -> keras.Model:
    """Returns a copy of `model` whose `SyncBatchNormalization` layers are plain again.

    The inverse of `convert_sync_batchnorm`: every `SyncBatchNormalization`
    becomes a `keras.layers.BatchNormalization` with the same config (less
    `group_size`) and the same weights, for export or single-device use. The
    rest of the model is copied as `convert_sync_batchnorm` copies it, so
    `revert_sync_batchnorm(convert_sync_batchnorm(model))` has the classes,
    configs, weights and outputs of `model`.

    Nothing to revert is not an error: `model` itself is returned, with a
    warning.

    Args:
        model: A Functional or Sequential `keras.Model`.

    Returns:
        The reverted copy of `model`, or `model` itself when it has no
        `SyncBatchNormalization` layer.

    Raises:
        TypeError: If `model` is not a `keras.Model`.
        ValueError: If a `SyncBatchNormalization` sits inside a subclassed
            layer or model (the rebuild cannot reach it), or if a layer cannot
            be rebuilt from its config. The message names the layers by path.

    Example:

    >>> plain = revert_sync_batchnorm(synced)
    >>> plain.save("model.keras")
    """
    _check_model(model, "revert_sync_batchnorm")

    def replace(layer: keras.layers.Layer) -> keras.layers.Layer:
        kwargs = _layer_kwargs(layer)
        kwargs.pop("group_size", None)
        return keras.layers.BatchNormalization(**kwargs)

    return _rebuild(
        model,
        select=lambda layer: isinstance(layer, SyncBatchNormalization),
        replace=replace,
        function="revert_sync_batchnorm",
        kind="SyncBatchNormalization layer",
        remedy=(
            "Create keras.layers.BatchNormalization in that layer's own code instead, "
            "or build the block with the Functional API so it can be rebuilt."
        ),
    )


def _check_model(model: Any, function: str) -> None:
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"{function} expects a keras.Model (Functional or Sequential). Received: "
            f"{model!r} of type {type(model).__name__}. To use a single layer, wrap it in a "
            "model first, e.g. keras.Sequential([keras.Input(shape), layer])."
        )


def _rebuild(
    model: keras.Model,
    select: Callable[[keras.layers.Layer], bool],
    replace: Callable[[keras.layers.Layer], keras.layers.Layer],
    function: str,
    kind: str,
    remedy: str,
    share_layers: bool = False,
) -> keras.Model:
    paths: dict[int, str] = {}
    # Taken before anything is rebuilt: with shared layers, setting a rebuilt
    # model's `trainable` also overwrites the flags of the layers it shares.
    flags: dict[int, bool] = {}
    reachable: list[keras.layers.Layer] = []
    unreachable: list[str] = []
    for path, layer, in_graph in _walk(model):
        paths[id(layer)] = path
        flags[id(layer)] = layer.trainable
        if select(layer):
            if in_graph:
                reachable.append(layer)
            else:
                unreachable.append(path)

    if unreachable:
        listed = ", ".join(repr(path) for path in unreachable)
        raise ValueError(
            f"{function} cannot reach the {kind}(s) {listed}: they are inside a subclassed "
            "layer or model, whose structure Keras cannot rebuild, and they would be left "
            f"unchanged. {remedy}"
        )
    if not reachable:
        warnings.warn(
            f"{function}: model {model.name!r} has no {kind}; it is returned unchanged.",
            stacklevel=3,
        )
        return model
    if share_layers:
        check_shareable(model, reachable, function)

    # Replacements are created before cloning so that a layer the plugin rejects
    # fails the call before any copy is built.
    replacements: dict[int, keras.layers.Layer] = {}
    for layer in reachable:
        try:
            replacements[id(layer)] = replace(layer)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"{function} cannot replace layer {paths[id(layer)]!r} "
                f"({type(layer).__name__}): {error}"
            ) from error

    holds_replacement: dict[int, bool] = {}

    def must_rebuild(graph_model: keras.Model) -> bool:
        if id(graph_model) not in holds_replacement:
            holds_replacement[id(graph_model)] = any(
                id(child) in replacements or (_is_graph_model(child) and must_rebuild(child))
                for child in graph_model.layers
            )
        return holds_replacement[id(graph_model)]

    clones: dict[int, keras.layers.Layer] = {}
    copied: set[int] = set()

    def clone_layer(layer: keras.layers.Layer) -> keras.layers.Layer:
        # One cache for every nesting level keeps a layer shared between a
        # sub-model and its parent shared in the copy.
        if id(layer) not in clones:
            if _is_graph_model(layer) and (not share_layers or must_rebuild(layer)):
                clones[id(layer)] = _clone_graph_model(layer, clone_layer)
            elif share_layers and id(layer) not in replacements:
                clones[id(layer)] = layer
            else:
                if id(layer) in replacements:
                    clone = replacements[id(layer)]
                else:
                    clone = _clone_from_config(layer, paths, function)
                if _build_as_copy(layer, clone):
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


def _walk(
    layer: keras.layers.Layer,
    path: str | None = None,
    in_graph: bool = True,
    seen: set[int] | None = None,
) -> Iterator[tuple[str, keras.layers.Layer, bool]]:
    """Yields `(path, layer, in_graph)` for `layer` and everything it contains, once each.

    `in_graph` is whether the rebuild reaches the layer: true for the layers
    of Functional and Sequential models (recursively), false for anything held
    by a subclassed layer or model, which is found through its attributes.
    """
    seen = set() if seen is None else seen
    if id(layer) in seen:
        return
    seen.add(id(layer))
    path = layer.name if path is None else path
    yield path, layer, in_graph
    if _is_graph_model(layer):
        children, children_in_graph = layer.layers, in_graph
    else:
        children, children_in_graph = _attribute_layers(layer), False
    for child in children:
        yield from _walk(child, f"{path}/{child.name}", children_in_graph, seen)


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


def _is_graph_model(layer: keras.layers.Layer) -> bool:
    """Whether `layer` is rebuilt layer by layer, as `keras.models.clone_model` can."""
    return isinstance(layer, (keras.Sequential, _functional_class()))


@functools.cache
def _functional_class() -> type:
    # Keras does not export its Functional class; a minimal functional model is
    # an instance of it. Explicit names keep Keras' automatic name counters as
    # they are.
    probe = keras.Input(shape=(1,), name="functional_probe_input")
    return type(keras.Model(probe, probe, name="functional_probe"))


def _layer_kwargs(layer: keras.layers.Layer) -> dict[str, Any]:
    """The layer's config as constructor arguments (the dtype policy deserialised)."""
    config = layer.get_config()
    if isinstance(config.get("dtype"), dict):
        config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return config


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
        for _, layer, _ in _walk(old):
            layer.trainable = flags[id(layer)]
        return
    new.trainable = flags[id(old)]
    if not _is_graph_model(old):
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
