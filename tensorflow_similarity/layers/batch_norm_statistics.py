"""Recomputing batch norm's moving statistics from data ("precise" batch norm)."""

from __future__ import annotations

import keras
import numpy as np

from tensorflow_similarity.layer_walk import walk_layers


def recompute_batch_norm_statistics(
    model: keras.Model, images: np.ndarray, batch_size: int = 256
) -> int:
    """Sets each batch norm layer's moving statistics to their average over `images`.

    A batch norm layer normalises with its moving mean and variance in
    inference mode, an exponential average of the training batches'
    statistics. With Keras' momentum of 0.99 that average still weighs the
    initial values (mean 0, variance 1) by 0.99**n after `n` steps, 45% after
    80: in a short run the inference-mode network is not the network that
    was trained. This replaces the moving statistics of every trainable
    batch norm layer of `model` (nested models and subclassed layers
    included, `SyncBatchNormalization` too) with the mean, weighted by batch
    size, of each batch's statistics over `images` in training mode: the
    population statistics of Wu and Johnson's "precise BN" (*Rethinking
    "Batch" in BatchNorm*, 2021). Nothing else changes: weights, momentum and
    the other layers' state are as before. Layers with `trainable=False` are
    frozen and keep their statistics. Calls run in the current replica
    context (in a callback of `fit` under a strategy: the cross-replica one,
    each call one device's batch), so synchronised layers do not exchange.

    Args:
        model: A built Keras model (or layer) with one input.
        images: `[count, ...]` inputs, typically the training images without
            augmentation: the data the model will embed.
        batch_size: Images per forward pass. Defaults to `256`.

    Returns:
        The number of batch norm layers updated.

    Raises:
        ValueError: If `images` is empty, `batch_size` is not a positive
            integer, or `model` has no trainable batch norm layer.

    Example:
        ```python
        recompute_batch_norm_statistics(model.backbone, x_train)
        embeddings = model.backbone.predict(x_test)
        ```
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer; got {batch_size!r}.")
    count = len(images)
    if count == 0:
        raise ValueError("images is empty: pass the images whose statistics to compute.")
    layers = [
        found.layer
        for found in walk_layers(model)
        if isinstance(found.layer, keras.layers.BatchNormalization) and found.layer.trainable
    ]
    if not layers:
        raise ValueError(
            f"{model.name} has no trainable batch norm layer: there are no statistics to recompute."
        )
    momenta = [layer.momentum for layer in layers]
    try:
        seen = 0
        for start in range(0, count, batch_size):
            batch = images[start : start + batch_size]
            # moving = moving * m + batch * (1 - m) with m = seen / (seen + n) is the
            # running mean of the batches so far, weighted by their sizes.
            for layer in layers:
                layer.momentum = seen / (seen + len(batch))
            model(batch, training=True)
            seen += len(batch)
    finally:
        for layer, momentum in zip(layers, momenta, strict=True):
            layer.momentum = momentum
    return len(layers)
