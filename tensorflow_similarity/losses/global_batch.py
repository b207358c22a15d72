"""`GlobalBatchLoss`: the one contract of every loss computed over the global batch."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity import collectives
from tensorflow_similarity.collectives import global_sum, scale_for_replicas

MEAN_REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")
REDUCTIONS = (*MEAN_REDUCTIONS, "sum", "none", None)


def computation_dtype(dtype: Any) -> str:
    """Returns `dtype` promoted to at least float32, for stable statistics."""
    return keras.backend.result_type(dtype, "float32")


class GlobalBatchLoss(keras.losses.Loss):
    """Base class of the losses whose value is that of the global batch.

    A metric or self-supervised loss couples the samples of a batch (an
    anchor is mined or contrasted against the others, a correlation is taken
    over samples), so under `tf.distribute` the loss of the global batch is no
    combination of per-replica losses computed apart. Every loss of the
    package follows one contract: in a replica context with `K > 1` replicas
    its value and gradients are those of one device holding the concatenated
    global batch (the replicas' batches in replica order; they may differ in
    size, an empty one included), as the optimizer sees them once it sums the
    replicas' gradients.

    A loss is one of two kinds:

    - Per-sample terms (`per_sample_terms = True`; SimCLR, SimSiam, the metric
      losses): the loss is the mean over the global batch of one term per
      sample, and each replica computes only the terms of its own samples,
      against keys gathered from every replica
      (`tensorflow_similarity.collectives.gather_keys`, whose gradient sends
      each replica's share back to the rows it came from). Its compute and
      memory are those of its `n_k` rows against the `N` keys.
    - Batch statistics (`per_sample_terms = False`; Barlow Twins, VICReg): the
      loss is a function of statistics of the whole batch (means, variances,
      correlations), which every replica computes from the gathered batch.

    Reductions have Keras' meaning, over the global batch:

    - `"sum_over_batch_size"` (default; `"mean"`, `"mean_with_sample_weight"`
      and 0.17's `"auto"` alike): the global mean `L`. In a replica context
      with `K > 1` replicas every replica returns `L / K`, Keras' scaling of
      its mean losses, so the replicas' values add up to `L`; the gradient of
      each is that of its own samples' share, so the replicas' gradients add
      up to the gradient of `L`.
    - `"sum"`: the sum of the terms of this replica's samples, so that the
      replicas' values and gradients add up to those of the sum over the
      global batch, `N * L`; on one device, the sum over the batch. A loss of
      batch statistics returns `n_k * L`, its `n_k` samples' share of `N * L`.
    - `"none"` or `None`: the `[n_k]` terms of this replica's samples, in
      their input order, unscaled; their sum over the replicas divided by `N`
      is `L`. Losses of batch statistics have no terms and refuse it.

    `sample_weight` is refused: each term depends on the whole global batch.

    Subclasses implement `check_inputs` (static checks; the default checks two
    `[batch, features]` views of one shape) and `call(y_true, y_pred)`,
    returning this replica's `[n_k]` terms, or the global scalar for a loss
    of batch statistics; any other shape is refused (`check_result`). They
    set the class attribute `min_batch_size`, the smallest global batch
    their formula is defined for (checked statically on one device, at run
    time after gathering under a strategy, with `check_global_batch`). A subclass is tested with
    `tensorflow_similarity.testing.assert_replica_parity`, which compares one
    device with 2, 4 and 8 replicas holding different data.

    Args:
        name: Name of the loss instance.
        reduction: `"sum_over_batch_size"` (default), `"mean"`,
            `"mean_with_sample_weight"`, `"sum"`, `"none"` or `None`, as
            above; `"auto"` means `"sum_over_batch_size"`.
        dtype: Dtype of the loss computation; defaults to
            `keras.backend.floatx()`. Statistics are computed in at least
            float32.

    Raises:
        ValueError: For an unknown reduction, `"none"` on a loss of batch
            statistics, or (when called) `sample_weight`, or a subclass's
            `call` returning other than `[n]` terms (a scalar for a loss of
            batch statistics).

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.losses import GlobalBatchLoss
    >>> from tensorflow_similarity.collectives import gather_keys
    >>> class Spread(GlobalBatchLoss):
    ...     # Each sample's mean squared distance to the global batch's samples.
    ...     def call(self, y_true, y_pred):
    ...         (keys,) = gather_keys(y_pred)
    ...         gaps = y_pred[:, None, :] - keys[None, :, :]
    ...         return tf.reduce_mean(tf.reduce_sum(gaps**2, axis=-1), axis=1)
    >>> z = tf.constant([[0.0, 0.0], [3.0, 4.0]])
    >>> float(Spread()(z, z)), float(Spread(reduction="sum")(z, z))
    (12.5, 25.0)
    """

    min_batch_size = 1
    per_sample_terms = True

    def __init__(
        self,
        name: str | None = None,
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        if reduction == "auto":
            reduction = "sum_over_batch_size"
        if reduction not in REDUCTIONS:
            raise ValueError(
                f"{type(self).__name__}: unknown reduction={reduction!r}. Use one of "
                f"{list(REDUCTIONS)} (or 'auto', meaning 'sum_over_batch_size')."
            )
        if reduction in (None, "none") and not self.per_sample_terms:
            raise ValueError(
                f"{type(self).__name__} has no per-sample terms for reduction={reduction!r} to "
                "return: its terms are statistics of the whole batch (means, variances, "
                "correlations over samples). Use the default 'sum_over_batch_size', or 'sum'."
            )
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> tf.Tensor:
        if sample_weight is not None:
            raise ValueError(
                f"{type(self).__name__} does not accept sample_weight: each of its terms "
                "depends on the whole global batch. Call it without sample_weight (drop "
                "sample_weight / class_weight from fit())."
            )
        with keras.name_scope(self.name):
            y_true, y_pred = self.check_inputs(y_true, y_pred)
            result = self.check_result(self.call(y_true, y_pred), y_pred)
            return self.reduce(result, tf.shape(y_pred)[0])

    def check_result(self, result: Any, y_pred: tf.Tensor) -> tf.Tensor:
        """Checks that `call` returned the shape of the contract; returns it as a tensor.

        A loss of per-sample terms must return `[n]`, one term per row of
        `y_pred` (this replica's batch); a loss of batch statistics a scalar.
        Any other shape would be reduced into a wrong value (`"sum"` of a
        mean is the mean; `[n, 2]` terms count each sample twice), so it is
        refused: statically when the trace knows the shapes, otherwise by a
        run-time check that gates the result.

        Args:
            result: What `call` returned.
            y_pred: The checked `y_pred`, whose first dimension is the batch.

        Returns:
            `result` as a tensor, gated on the run-time check when its shape
            was not known statically.

        Raises:
            ValueError: Naming the subclass, the shape returned and the
                shape expected, when the static shapes disagree.
            tf.errors.InvalidArgumentError: The same, at run time.
        """
        result = tf.convert_to_tensor(result)
        name = type(self).__name__
        if not self.per_sample_terms:
            if result.shape.rank is not None and result.shape.rank != 0:
                raise ValueError(
                    f"{name}.call returned a tensor of shape {result.shape}, and a loss of "
                    "batch statistics (per_sample_terms = False) must return the global "
                    "scalar, of shape []. Reduce it to one value inside call."
                )
            if result.shape.rank is not None:
                return result
            valid = tf.equal(tf.rank(result), 0)
            expected = "[]"
        else:
            batch = y_pred.shape[0]
            rank = result.shape.rank
            if rank is not None and (
                rank != 1
                or (batch is not None and result.shape[0] is not None and result.shape[0] != batch)
            ):
                raise ValueError(self._terms_message(result.shape, batch))
            if rank == 1 and result.shape[0] is not None and batch is not None:
                return result
            valid = tf.logical_and(
                tf.equal(tf.rank(result), 1), tf.equal(tf.size(result), tf.shape(y_pred)[0])
            )
            expected = "[n], n being this replica's batch size"
        check = tf.debugging.Assert(
            valid,
            [
                f"{name}.call returned a tensor of shape",
                tf.shape(result),
                f"and the GlobalBatchLoss contract expects {expected}.",
            ],
        )
        with tf.control_dependencies([check] if check is not None else []):
            return tf.identity(result)

    def _terms_message(self, shape: Any, batch: Any) -> str:
        size = "n" if batch is None else str(batch)
        return (
            f"{type(self).__name__}.call returned a tensor of shape {shape}, and a loss of "
            f"per-sample terms must return one term per sample of this replica's batch, of "
            f"shape [n] = [{size}]. Return the per-sample terms (reduce any other axis "
            "inside call, and leave the mean over the batch to the reduction); a loss that "
            "is a statistic of the whole batch sets per_sample_terms = False and returns "
            "a scalar."
        )

    def reduce(self, result: tf.Tensor, local_batch: tf.Tensor) -> tf.Tensor:
        """Applies the reduction to what `call` returned.

        Args:
            result: This replica's `[n_k]` terms, or the global scalar of a
                loss of batch statistics.
            local_batch: `n_k`, this replica's number of samples.

        Returns:
            The reduced loss, as the class docstring says.
        """
        if not self.per_sample_terms:
            if self.reduction == "sum":
                return result * tf.cast(local_batch, result.dtype)
            return scale_for_replicas(result)
        if self.reduction in (None, "none"):
            return result
        local_sum = tf.reduce_sum(result)
        if self.reduction == "sum":
            return local_sum
        count = tf.cast(tf.size(result), result.dtype)
        total, global_count = tf.unstack(global_sum(tf.stack([local_sum, count])))
        # The gradient of this replica's share of the global mean, the value
        # of the global mean scaled for the replicas: both add up to the mean's.
        share = tf.math.divide_no_nan(local_sum, tf.stop_gradient(global_count))
        value = scale_for_replicas(tf.math.divide_no_nan(total, global_count))
        return share + tf.stop_gradient(value - share)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        """Returns this replica's `[n_k]` terms, or the global scalar of batch statistics."""
        raise NotImplementedError(f"{type(self).__name__} must implement call(y_true, y_pred).")

    def check_inputs(self, y_true: Any, y_pred: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Checks two views' static shapes before any work; returns them as tensors.

        Returns the views gated, in a graph whose trace left their shapes
        unknown, on a run-time check that they match, so that no computation
        on mismatched views can run (and fail with a less useful error) first.

        Raises:
            ValueError: On views that are not `[batch, features]` tensors of
                one shape, or a batch smaller than `min_batch_size` on one
                device.
        """
        view1 = keras.ops.convert_to_tensor(y_true, dtype=self.dtype)
        view2 = keras.ops.convert_to_tensor(y_pred, dtype=self.dtype)
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
        if view1.shape.is_fully_defined() and view2.shape.is_fully_defined():
            return view1, view2
        check = tf.debugging.assert_equal(
            tf.shape(view1),
            tf.shape(view2),
            message=f"{name}: the two views must have the same shape [batch, features].",
        )
        with tf.control_dependencies([check] if check is not None else []):
            return tf.identity(view1), tf.identity(view2)

    def _batch_size_message(self, batch: Any) -> str:
        return (
            f"{type(self).__name__} needs a global batch of at least "
            f"{self.min_batch_size} samples, received {batch}. Use a larger batch size."
        )

    def check_global_batch(self, global_batch: tf.Tensor) -> None:
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
