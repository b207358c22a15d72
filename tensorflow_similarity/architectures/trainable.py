"""The `trainable` policy of the architecture builders."""

from __future__ import annotations

from collections.abc import Callable

import keras

from tensorflow_similarity.layer_walk import all_layers


def set_trainable(
    backbone: keras.Model,
    trainable: str,
    *,
    starts_last_stage: Callable[[keras.layers.Layer], bool] | None,
    freeze_batch_norm: bool,
) -> None:
    """Applies the `trainable` mode to a backbone, in place.

    Args:
        backbone: The backbone model.
        trainable: `"full"` (every layer trains), `"partial"` (the layers
            from the first one matching `starts_last_stage` on, in
            `backbone.layers` order) or `"frozen"` (none).
        starts_last_stage: Predicate marking the first layer of the last
            stage; required for `"partial"`.
        freeze_batch_norm: Whether every batch-norm layer is set
            `trainable=False` (inference mode: pretrained moving statistics
            are used and kept), as the original package did for pretrained
            backbones.

    Raises:
        ValueError: For `"partial"` when no layer matches `starts_last_stage`.
    """
    backbone.trainable = trainable != "frozen"
    if trainable == "partial":
        in_tail = False
        for layer in backbone.layers:
            in_tail = in_tail or bool(starts_last_stage and starts_last_stage(layer))
            layer.trainable = in_tail
        if not in_tail:
            raise ValueError(
                f"trainable='partial' found no last stage in backbone {backbone.name!r}: "
                "no layer matched its first layer."
            )
    if freeze_batch_norm:
        for layer in all_layers(backbone):
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False
