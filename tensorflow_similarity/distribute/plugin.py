"""The sync-BN plugin: which batch-norm layers to synchronise, how, and how to undo it."""

from __future__ import annotations

import warnings
from typing import Any

import keras

from tensorflow_similarity import layer_walk
from tensorflow_similarity._validation import check_bool
from tensorflow_similarity.collectives import check_group_size_argument
from tensorflow_similarity.distribute import rebuild
from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization


@keras.saving.register_keras_serializable(package="Similarity")
class SyncBatchNormPlugin:
    """Synchronises a model's batch-norm layers across replicas.

    Two verbs, as PyTorch Lightning's layer-sync plugins: `apply(model)` returns
    the model with its `keras.layers.BatchNormalization` layers replaced by
    `SyncBatchNormalization`, and `revert(model)` returns it with plain batch
    norm again (for export or single-device inference). Both keep every
    weight, layer name, `trainable` flag and dtype policy. Every entry point of
    the package that synchronises a model (`convert_sync_batchnorm`, the
    architecture builders, `ContrastiveModel`) calls `apply`, and the native
    builders create their layers with `create_layer`, so a subclass changes
    what all of them do.

    The plugin is the policy: `should_convert` picks the layers `apply`
    replaces and `create_layer` makes their replacements; `should_revert`
    and `revert_layer` are the inverse, for `revert`. The graph surgery
    itself is `distribute.rebuild`, which knows nothing of batch norm.

    `sync_bn=True` in this package's builders means `SyncBatchNormPlugin()`;
    `sync_bn=<plugin>` means that plugin. Plugins are registered Keras
    serialisable objects: a model that keeps its plugin in its config
    (`ContrastiveModel`) gets it back, class and arguments, from a `.keras`
    file.

    Args:
        group_size: `None` (default) syncs all replicas; an integer syncs
            contiguous groups of that many replicas (see `GroupSyncBatchNorm`).

    Raises:
        ValueError: If `group_size` is neither `None` nor a positive integer.

    Example:

    >>> import keras
    >>> from tensorflow_similarity.distribute import SyncBatchNormPlugin
    >>> plugin = SyncBatchNormPlugin()
    >>> synced = plugin.apply(keras.applications.MobileNetV2(weights=None))
    >>> plain = plugin.revert(synced)
    """

    layer_class: type[keras.layers.Layer] = SyncBatchNormalization

    def __init__(self, group_size: int | None = None) -> None:
        # Fail here, before any model is built (and without building a layer, which would
        # take one of Keras' automatic layer names).
        check_group_size_argument(group_size)
        self.group_size = group_size

    def should_convert(self, layer: keras.layers.Layer) -> bool:
        """Returns whether `apply` replaces `layer`.

        Args:
            layer: A layer of the model being converted.

        Returns:
            `True` for every `keras.layers.BatchNormalization` that is not
            already an instance of `layer_class`.
        """
        return isinstance(layer, keras.layers.BatchNormalization) and not isinstance(
            layer, self.layer_class
        )

    def create_layer(self, **batch_norm_kwargs: Any) -> keras.layers.Layer:
        """Creates the synchronised layer from `BatchNormalization` arguments.

        Native builders call this in place of `keras.layers.BatchNormalization`;
        `apply` calls it with a batch-norm layer's config.

        Args:
            **batch_norm_kwargs: `keras.layers.BatchNormalization` arguments
                (`axis`, `momentum`, `epsilon`, `name`, ...).

        Returns:
            A new, unbuilt `layer_class` instance using this plugin's group size.
        """
        batch_norm_kwargs.pop("synchronized", None)
        batch_norm_kwargs["group_size"] = self.group_size
        return self.layer_class(**batch_norm_kwargs)

    def should_revert(self, layer: keras.layers.Layer) -> bool:
        """Returns whether `revert` replaces `layer`: it is an instance of `layer_class`.

        Args:
            layer: A layer of the model being reverted.

        Returns:
            Whether `layer` is one of this plugin's synchronised layers.
        """
        return isinstance(layer, self.layer_class)

    def revert_layer(self, layer: keras.layers.Layer) -> keras.layers.Layer:
        """Creates the plain `keras.layers.BatchNormalization` that replaces `layer`.

        Args:
            layer: A layer `should_revert` selected.

        Returns:
            A new, unbuilt batch-norm layer with `layer`'s config, less the
            arguments plain batch norm does not take (`group_size`, `exchange`).
        """
        kwargs = layer_kwargs(layer)
        for name in ("group_size", "exchange"):
            kwargs.pop(name, None)
        return keras.layers.BatchNormalization(**kwargs)

    def apply(self, model: keras.Model, *, share_layers: bool = False) -> keras.Model:
        """Returns `model` with the layers `should_convert` selects synchronised.

        A model in which nothing is selected is returned itself; a warning
        says so when it holds no `layer_class` layer either (then `sync_bn`
        would have no effect, e.g. ConvNeXt, which has no batch norm).

        Args:
            model: A Functional or Sequential Keras model.
            share_layers: Whether the result reuses the layers of `model` it
                does not replace, with their variables (see
                `convert_sync_batchnorm`). Defaults to `False`: a copy sharing
                nothing with `model`.

        Returns:
            The converted model, or `model` when nothing is selected.

        Raises:
            TypeError: If `model` is not a Keras model or `share_layers` not a bool.
            ValueError: If a selected layer cannot be reached or replaced, or
                a layer cannot be rebuilt (the message names it by path).
        """
        check_model(model, "convert_sync_batchnorm")
        check_bool(
            "share_layers",
            share_layers,
            owner="convert_sync_batchnorm",
            hint="Use share_layers=True or False.",
        )
        targets = layer_walk.find_layers(
            model,
            self.should_convert,
            function="convert_sync_batchnorm",
            kind="batch-norm layer selected by the plugin",
            remedy=(
                "Create the synchronised layer in that layer's own code instead "
                "(SyncBatchNormalization(...), or plugin.create_layer(...) to follow the "
                "plugin), or build the block with the Functional API so it can be rebuilt."
            ),
        )
        if not targets:
            if not any(self.should_revert(layer) for layer in layer_walk.all_layers(model)):
                warnings.warn(
                    f"model {model.name!r} has no batch-norm layer selected by {self!r} (no "
                    "batch-normalisation layer to synchronise; ConvNeXt, for one, uses "
                    "LayerNormalization, which is computed per sample and needs no sync): "
                    "sync_bn has no effect and the model is used unchanged.",
                    UserWarning,
                    stacklevel=2,
                )
            return model
        return rebuild.rebuild_model(
            model,
            targets,
            lambda layer: self.create_layer(**layer_kwargs(layer)),
            function="convert_sync_batchnorm",
            share_layers=share_layers,
        )

    def revert(self, model: keras.Model) -> keras.Model:
        """Returns a copy of `model` whose `layer_class` layers are plain batch norm.

        The inverse of `apply`: `revert(apply(model))` has the classes,
        configs, weights and outputs of `model`. Nothing to revert returns
        `model` itself, with a warning.

        Args:
            model: A model converted by `apply` (or built with sync batch norm).

        Returns:
            The reverted copy; `model` itself is left untouched.

        Raises:
            TypeError: If `model` is not a Keras model.
            ValueError: If a layer to revert cannot be reached, or a layer
                cannot be rebuilt (the message names it by path).
        """
        check_model(model, "revert_sync_batchnorm")
        kind = f"{self.layer_class.__name__} layer"
        targets = layer_walk.find_layers(
            model,
            self.should_revert,
            function="revert_sync_batchnorm",
            kind=kind,
            remedy=(
                "Create keras.layers.BatchNormalization in that layer's own code instead, "
                "or build the block with the Functional API so it can be rebuilt."
            ),
        )
        if not targets:
            warnings.warn(
                f"revert_sync_batchnorm: model {model.name!r} has no {kind}; it is returned "
                "unchanged.",
                UserWarning,
                stacklevel=2,
            )
            return model
        return rebuild.rebuild_model(
            model, targets, self.revert_layer, function="revert_sync_batchnorm"
        )

    def get_config(self) -> dict[str, Any]:
        """Returns the plugin's constructor arguments."""
        return {"group_size": self.group_size}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SyncBatchNormPlugin:
        """Creates a plugin from `get_config()`'s output."""
        return cls(**config)

    def __repr__(self) -> str:
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({arguments})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.get_config() == self.get_config()

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self.get_config().items()))))


@keras.saving.register_keras_serializable(package="Similarity")
class GroupSyncBatchNorm(SyncBatchNormPlugin):
    """Synchronises batch norm within contiguous groups of `group_size` replicas.

    With 8 replicas and `GroupSyncBatchNorm(2)`, replicas {0, 1}, {2, 3}, ...
    each share statistics: useful when a group is one machine's GPUs and the
    interconnect between machines is slow. The group size must divide the
    number of replicas (checked at the first training call).

    Args:
        group_size: Replicas per group, a positive integer.

    Raises:
        ValueError: If `group_size` is not a positive integer.

    Example:

    >>> import keras
    >>> from tensorflow_similarity.distribute import GroupSyncBatchNorm
    >>> model = keras.Sequential(
    ...     [keras.Input((4,)), keras.layers.Dense(8), keras.layers.BatchNormalization()])
    >>> synced = GroupSyncBatchNorm(2).apply(model)
    >>> synced.layers[-1].group_size
    2
    """

    def __init__(self, group_size: int) -> None:
        if group_size is None:
            raise ValueError(
                "GroupSyncBatchNorm needs a group size, a positive integer. "
                "To sync all replicas use SyncBatchNormPlugin() (or sync_bn=True)."
            )
        super().__init__(group_size=group_size)


def resolve_sync_bn(sync_bn: bool | SyncBatchNormPlugin) -> SyncBatchNormPlugin | None:
    """Turns the user-facing `sync_bn` argument into a plugin or `None`.

    Each public entry point resolves its `sync_bn` once with this; internal
    code passes the plugin (or `None`) on.

    Args:
        sync_bn: `False` (no synchronisation), `True` (the default plugin,
            all replicas) or a `SyncBatchNormPlugin` instance.

    Returns:
        `None` for `False`, `SyncBatchNormPlugin()` for `True`, else the plugin.

    Raises:
        TypeError: For any other value.
    """
    if sync_bn is False:
        return None
    if sync_bn is True:
        return SyncBatchNormPlugin()
    if isinstance(sync_bn, SyncBatchNormPlugin):
        return sync_bn
    raise TypeError(
        "sync_bn must be False, True or a SyncBatchNormPlugin instance (for example "
        f"GroupSyncBatchNorm(2)). Received: {sync_bn!r} of type {type(sync_bn).__name__}."
    )


def batch_norm_layer(plugin: SyncBatchNormPlugin | None, **kwargs: Any) -> keras.layers.Layer:
    """Returns the plugin's synchronised layer, or a plain `BatchNormalization`.

    The batch-norm factory of every native builder and head of the package.

    Args:
        plugin: The sync-BN plugin, or `None` for plain batch norm.
        **kwargs: `keras.layers.BatchNormalization` arguments.

    Returns:
        A new, unbuilt batch-norm layer.
    """
    if plugin is None:
        return keras.layers.BatchNormalization(**kwargs)
    return plugin.create_layer(**kwargs)


def check_model(model: Any, function: str) -> None:
    """Raises a `TypeError` unless `model` is a `keras.Model`.

    Args:
        model: The value received.
        function: The public function called, for the message.

    Raises:
        TypeError: If `model` is not a `keras.Model`.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"{function} expects a keras.Model (Functional or Sequential). Received: "
            f"{model!r} of type {type(model).__name__}. To use a single layer, wrap it in a "
            "model first, e.g. keras.Sequential([keras.Input(shape), layer])."
        )


def layer_kwargs(layer: keras.layers.Layer) -> dict[str, Any]:
    """Returns a layer's config as constructor arguments (the dtype policy deserialised).

    Args:
        layer: A layer.

    Returns:
        `layer.get_config()` with a serialised dtype policy turned back into one.
    """
    config = layer.get_config()
    if isinstance(config.get("dtype"), dict):
        config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
    return config
