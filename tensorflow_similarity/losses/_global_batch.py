"""`GlobalBatchLoss`, the base of the self-supervised losses, and its contract."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import ops

from tensorflow_similarity import collectives
from tensorflow_similarity.collectives import scale_for_replicas

# Keras scales these reductions by 1 / num_replicas under tf.distribute and
# leaves "sum" and "none" unscaled; the global-batch losses keep that contract.
_SCALED_REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")


def computation_dtype(dtype: Any) -> str:
    """Returns `dtype` promoted to at least float32, for stable statistics."""
    return keras.backend.result_type(dtype, "float32")


class GlobalBatchLoss(keras.losses.Loss):
    """Base class of the losses of two views' embeddings over the global batch.

    The global-batch contract. A self-supervised loss such as NT-Xent or
    Barlow Twins couples every sample of the batch with the others, so under
    `tf.distribute` the loss of the global batch is no combination of
    per-replica losses. In a replica context with `K > 1` replicas, every
    replica therefore computes the loss of the whole global batch, from what
    it gathers from the other replicas with differentiable collectives
    (`tensorflow_similarity.collectives`; replicas may hold different batch
    sizes), and `__call__` divides it by `K`, as Keras does for its mean
    losses. The gradient of a gathered tensor is the sum of what every replica
    sends back to it, so the optimizer's sum of the replicas' gradients is
    exactly the gradient of the single-device loss on the concatenated batch.
    Each subclass says in one line what it gathers.

    Subclasses implement `call(view1, view2)` returning the scalar loss of the
    batch they are given, the global one when they gather it. `__call__` checks
    the views, refuses sample weights (a loss coupling all samples has no
    per-sample terms to weight) and applies Keras' distribution scaling to the
    scalar, which Keras' own reduction leaves unscaled.

    Subclasses set the class attribute `min_batch_size`, the smallest global
    batch their formula is defined for (checked statically on one device, at
    run time after gathering under a strategy), and `per_sample_terms` when
    the loss is a mean of per-sample terms (SimSiam, SimCLR's anchors): then
    `reduction="none"` returns those terms for the local batch, as Keras
    losses do; a loss of batch statistics (Barlow Twins, VICReg) has none to
    return and refuses `"none"`.

    Args:
        name: Name of the loss instance.
        reduction: `"sum_over_batch_size"` (default), `"mean"` or
            `"mean_with_sample_weight"`: in a replica context with `K > 1`
            replicas the returned value is the global loss divided by `K`, the
            Keras convention that makes the optimizer's sum of the replicas'
            gradients the gradient of the global loss. `"auto"` (the old
            `tf.keras` default) means `"sum_over_batch_size"`. `"sum"`: the
            global loss itself, unscaled, for custom training loops that scale
            on their own. `"none"` or `None`: the `[batch]` per-sample terms of
            the local batch, unscaled, for losses with `per_sample_terms`.
        dtype: Dtype of the loss computation; defaults to
            `keras.backend.floatx()`. Statistics are computed in at least
            float32.
    """

    min_batch_size = 1
    per_sample_terms = False

    def __init__(
        self,
        name: str | None = None,
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        if reduction == "auto":
            reduction = "sum_over_batch_size"
        if reduction in (None, "none") and not self.per_sample_terms:
            raise ValueError(
                f"{type(self).__name__} has no per-sample terms for reduction={reduction!r} to "
                "return: its terms are statistics of the whole batch (means, variances, "
                "correlations over samples). Use reduction='sum' for the unscaled global loss, "
                "or the default 'sum_over_batch_size'."
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> tf.Tensor:
        if sample_weight is not None:
            raise ValueError(
                f"{type(self).__name__} does not accept sample_weight: it is a single "
                "value for the whole global batch, coupling all samples, so it has no "
                "per-sample terms to weight. Call it without sample_weight (drop "
                "sample_weight / class_weight from fit())."
            )
        with keras.name_scope(self.name):
            view1 = ops.convert_to_tensor(y_true, dtype=self.dtype)
            view2 = ops.convert_to_tensor(y_pred, dtype=self.dtype)
            self._check_views(view1, view2)
            view1, view2 = self._check_shapes_at_run_time(view1, view2)
            loss = self.call(view1, view2)
            if self.reduction in _SCALED_REDUCTIONS:
                loss = scale_for_replicas(loss)
            return loss

    def _check_views(self, view1: tf.Tensor, view2: tf.Tensor) -> None:
        """Checks the views' static shapes, before any computation."""
        name = type(self).__name__
        if len(view1.shape) != 2 or len(view2.shape) != 2:
            raise ValueError(
                f"{name} expects two views of shape [batch, features]. Received shapes "
                f"{view1.shape} and {view2.shape}. Flatten or pool the embeddings first."
            )
        if not view1.shape.is_compatible_with(view2.shape):
            raise ValueError(
                f"{name} expects both views to have the same shape [batch, features] "
                f"(row i of each view is the same sample). Received shapes "
                f"{view1.shape} and {view2.shape}."
            )
        # Under a multi-replica context the local batch may be smaller than the
        # minimum (a partial last batch): only the global size is checked, later.
        batch = view1.shape[0] if view1.shape[0] is not None else view2.shape[0]
        if (
            batch is not None
            and batch < self.min_batch_size
            and collectives.sync_replica_context() is None
        ):
            raise ValueError(self._batch_size_message(batch))

    def _batch_size_message(self, batch: Any) -> str:
        return (
            f"{type(self).__name__} needs a global batch of at least "
            f"{self.min_batch_size} samples per view, received {batch}. Use a "
            "larger batch size."
        )

    def _check_shapes_at_run_time(
        self, view1: tf.Tensor, view2: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Checks, when the trace left them unknown, that the views' shapes match.

        Returns the views gated on the check, so that in a graph no computation
        on mismatched views can run (and fail with a less useful error) first.
        """
        if view1.shape.is_fully_defined() and view2.shape.is_fully_defined():
            return view1, view2
        check = tf.debugging.assert_equal(
            tf.shape(view1),
            tf.shape(view2),
            message=f"{type(self).__name__}: the two views must have the same shape "
            "[batch, features].",
        )
        with tf.control_dependencies([check] if check is not None else []):
            return tf.identity(view1), tf.identity(view2)

    def _check_global_batch(self, global_batch: tf.Tensor) -> None:
        """Checks the gathered batch size, which is only known at run time."""
        if self.min_batch_size > 1:
            tf.debugging.assert_greater_equal(
                global_batch,
                tf.cast(self.min_batch_size, global_batch.dtype),
                message=self._batch_size_message("fewer"),
            )

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["dtype"] = self.dtype
        return config
