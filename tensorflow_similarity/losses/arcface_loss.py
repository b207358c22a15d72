"""ArcFace: additive angular margin softmax over trained class centres."""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number
from tensorflow_similarity.losses.metric_loss import MetricLoss


@keras.saving.register_keras_serializable(package="Similarity")
class ArcFaceLoss(MetricLoss):
    """Additive angular margin loss (ArcFace) on the cosines to the class centres.

    From Deng, Guo, Xue & Zafeiriou, "ArcFace: Additive Angular Margin Loss
    for Deep Face Recognition", CVPR 2019 (https://arxiv.org/abs/1801.07698).
    Called as `loss(labels, cosines)`, with `cosines` the `[n, num_classes]`
    output of a `tensorflow_similarity.layers.CosineClassifier` head, whose
    weights are the trained class centres. With `theta_y` the angle to the
    sample's own centre:

        t = e^{s cos(theta_y + m)}
        l = -log( t / (t + sum_{c != y} e^{s cos theta_c}) )

    Where `theta_y + m > pi` the target logit is `cos(theta_y) - m sin(m)`
    instead (the reference implementation's choice, keeping it decreasing in
    `theta_y`). Labels must lie in `[0, num_classes)`. Cosines are clipped to
    `[-1, 1]` (rounding); a NaN or infinite cosine gives that sample a NaN
    term.

    Across replicas: nothing is mined, each sample's term only needs its own
    cosines; the labels and cosines are still gathered so that the mean is
    exactly that of the global batch (unequal replicas included). The class
    centres are the head layer's weights, mirrored by the strategy.

    Args:
        margin: Additive angular margin `m` in radians, in `[0, pi/2]`.
            Defaults to `0.5`.
        scale: Logit scale `s > 0`. Defaults to `64.0`.
        name: Name of the loss. Defaults to `"ArcFaceLoss"`.
        reduction: See `MetricLoss`.
        dtype: See `MetricLoss`.

    Returns (when called):
        A scalar, or per-sample values with `reduction="none"`.

    Raises:
        ValueError: On a margin or scale out of range, or bad inputs.

    Example:

    >>> import keras
    >>> from tensorflow_similarity.layers import CosineClassifier
    >>> from tensorflow_similarity.losses import ArcFaceLoss
    >>> inputs = keras.Input((8,))
    >>> embedding = keras.layers.Dense(4, name="embedding")(inputs)
    >>> model = keras.Model(inputs, CosineClassifier(10)(embedding))
    >>> model.compile(optimizer="sgd", loss=ArcFaceLoss())
    """

    def __init__(
        self,
        margin: float = 0.5,
        scale: float = 64.0,
        name: str = "ArcFaceLoss",
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        self.margin = check_number("margin", margin, low=0.0, high=math.pi / 2, owner=owner)
        self.scale = check_number("scale", scale, positive=True, owner=owner)
        super().__init__(distance=None, name=name, reduction=reduction, dtype=dtype)

    def call(self, labels: tf.Tensor, cosines: tf.Tensor) -> tf.Tensor:
        # The clip absorbs rounding just past +-1; an infinite cosine is no such
        # thing, and clipping it would hide it (a finite loss, a zero gradient).
        clipped = tf.clip_by_value(cosines, -1.0, 1.0)
        cosines = tf.where(
            tf.math.is_finite(cosines), clipped, tf.constant(float("nan"), cosines.dtype)
        )
        target = tf.gather(cosines, labels, axis=1, batch_dims=1)
        # sin from cos: clipped away from 0 so that sqrt's gradient stays finite.
        sine = tf.sqrt(tf.maximum(1.0 - tf.square(target), 1e-12))
        m = self.margin
        shifted = target * math.cos(m) - sine * math.sin(m)
        shifted = tf.where(target > math.cos(math.pi - m), shifted, target - m * math.sin(m))
        one_hot = tf.one_hot(labels, tf.shape(cosines)[1]) > 0.5
        logits = self.scale * tf.where(one_hot, shifted[:, tf.newaxis], cosines)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(margin=self.margin, scale=self.scale)
        return config
