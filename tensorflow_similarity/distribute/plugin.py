"""The sync-BN plugin: which batch-norm layers to synchronise, and how."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity.layers.sync_batch_norm import SyncBatchNormalization


class SyncBatchNormPlugin:
    """Synchronises a model's batch-norm layers across replicas.

    Two verbs, as PyTorch Lightning's layer-sync plugins: `apply(model)` returns
    a copy of the model whose `keras.layers.BatchNormalization` layers are
    `SyncBatchNormalization`, and `revert(model)` returns a copy with plain
    batch norm again (for export or single-device inference). Both keep every
    weight, layer name, `trainable` flag and dtype policy.

    The default plugin synchronises all replicas. Subclass it to change the
    policy: override `should_convert` to choose which layers are converted, or
    `create_layer` / `layer_class` to use another layer.

    `sync_bn=True` in this package's builders means `SyncBatchNormPlugin()`;
    `sync_bn=<plugin>` means that plugin.

    Args:
        group_size: `None` (default) syncs all replicas; an integer syncs
            contiguous groups of that many replicas (see `GroupSyncBatchNorm`).

    Example:

    >>> plugin = SyncBatchNormPlugin()
    >>> synced = plugin.apply(keras.applications.MobileNetV2(weights=None))
    >>> plain = plugin.revert(synced)
    """

    layer_class: type[keras.layers.Layer] = SyncBatchNormalization

    def __init__(self, group_size: int | None = None) -> None:
        # The layer validates the value; fail here, before any model is built.
        SyncBatchNormalization(group_size=group_size)
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
        the converter calls it with a batch-norm layer's config.

        Args:
            **batch_norm_kwargs: `keras.layers.BatchNormalization` arguments
                (`axis`, `momentum`, `epsilon`, `name`, ...).

        Returns:
            A new, unbuilt `layer_class` instance using this plugin's group size.
        """
        batch_norm_kwargs.pop("synchronized", None)
        batch_norm_kwargs["group_size"] = self.group_size
        return self.layer_class(**batch_norm_kwargs)

    def apply(self, model: keras.Model) -> keras.Model:
        """Returns a copy of `model` with its batch-norm layers synchronised.

        Args:
            model: A Functional or Sequential Keras model.

        Returns:
            The converted copy; `model` itself is left untouched.
        """
        from tensorflow_similarity.distribute.conversion import convert_sync_batchnorm

        return convert_sync_batchnorm(model, plugin=self)

    def revert(self, model: keras.Model) -> keras.Model:
        """Returns a copy of `model` with plain `keras.layers.BatchNormalization`.

        Args:
            model: A model converted by `apply` (or built with sync batch norm).

        Returns:
            The reverted copy; `model` itself is left untouched.
        """
        from tensorflow_similarity.distribute.conversion import revert_sync_batchnorm

        return revert_sync_batchnorm(model)

    def get_config(self) -> dict[str, Any]:
        """Returns the plugin's arguments, so builders can serialise their choice."""
        return {"group_size": self.group_size}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(group_size={self.group_size!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.get_config() == self.get_config()

    def __hash__(self) -> int:
        return hash((type(self), self.group_size))


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

    >>> synced = GroupSyncBatchNorm(2).apply(model)
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
