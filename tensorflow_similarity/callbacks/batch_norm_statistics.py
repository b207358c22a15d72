"""`BatchNormStatistics`: batch norm's statistics recomputed from images after each epoch."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from tensorflow_similarity.layer_walk import walk_layers
from tensorflow_similarity.layers import recompute_batch_norm_statistics


class BatchNormStatistics(keras.callbacks.Callback):
    """Recomputes a network's batch norm statistics from images at the end of each epoch.

    In a run of a few hundred steps Keras' moving averages still hold much of
    their initial values (see `layers.recompute_batch_norm_statistics`), so
    the network in inference mode is not the one that was trained. This
    callback sets them to the statistics of `images` after every epoch; put
    it before the callbacks that evaluate or save, so that they see the
    trained network. A network without trainable batch norm layers (layer
    norm only, say) is left as it is. Training itself normalises with batch
    statistics, so the weights `fit` learns are the same with or without it.

    Args:
        model: The network whose statistics to recompute (a
            `ContrastiveModel`'s backbone, say).
        images: The images to compute them from, without augmentation.
        batch_size: Images per forward pass. Defaults to `256`.

    Example:
        ```python
        from tensorflow_similarity.callbacks import BatchNormStatistics, KNNAccuracy

        model.fit(
            views,
            epochs=30,
            callbacks=[
                BatchNormStatistics(model.backbone, x_train),  # first: KNNAccuracy sees it
                KNNAccuracy((x_train, y_train), (x_test, y_test), embedding_fn=model.backbone),
            ],
        )
        ```
    """

    def __init__(self, model: keras.Model, images: np.ndarray, batch_size: int = 256) -> None:
        super().__init__()
        self.network = model
        self.images = images
        self.batch_size = batch_size
        self.active = any(
            isinstance(found.layer, keras.layers.BatchNormalization) and found.layer.trainable
            for found in walk_layers(model)
        )

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.active:
            recompute_batch_norm_statistics(self.network, self.images, self.batch_size)
