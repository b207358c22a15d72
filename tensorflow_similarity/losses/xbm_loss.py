"""Cross-batch memory: a metric loss mined against the embeddings of past batches."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity import collectives
from tensorflow_similarity._validation import check_int
from tensorflow_similarity.collectives import gather_with_owner, own_rows_first
from tensorflow_similarity.losses.global_batch import computation_dtype
from tensorflow_similarity.losses.metric_loss import MetricLoss


@keras.saving.register_keras_serializable(package="Similarity")
class XBM(MetricLoss):
    """Wraps a metric loss so that its anchors are mined against a memory of past batches.

    From Wang, Zhang, Huang & Scott, "Cross-Batch Memory for Embedding
    Learning", CVPR 2020 (https://arxiv.org/abs/1912.06798): embeddings drift
    slowly once training has warmed up, so those of recent batches are still
    informative keys. The memory is a FIFO queue of the last `memory_size`
    (label, embedding) pairs seen, the newest first. At each call after the
    first `warmup_steps` ones, the batch is enqueued first and then each of
    its anchors is mined against the whole queue: the keys are the batch
    itself followed by the newest `memory_size - n` stored pairs (all of the
    batch is kept when it is larger than the memory). The stored pairs are
    constants (no gradient flows into the past), and the batch then takes
    their place at the head of the queue. During the first `warmup_steps`
    calls the loss is the wrapped loss of the batch alone and the memory stays
    empty. These are the paper's and 0.17's semantics, except that 0.17 also
    truncated the batch itself to `memory_size` keys.

    Every call counts as a step and updates the memory, evaluation included:
    use another loss instance to evaluate.

    Across replicas: in a replica context with `K > 1` replicas the memory
    holds the gathered global batches, in the order of the replicas, and is
    the same on every replica; each replica mines its own anchors against
    the global batch and that shared memory, exactly as one device holding
    the concatenated batches would. The memory lives in non-trainable
    variables created with the loss, so the loss must be created inside
    `strategy.scope()` (as `compile` usually is). Embeddings are stored in the
    loss's `dtype` promoted to at least float32. The memory learns the
    embedding size at the first call and its filled part grows over the
    first steps, neither of which XLA allows: compile models trained with
    `XBM` with `jit_compile=False` (Keras' default `"auto"` picks XLA on
    GPUs). The memory is not saved with a model: a loaded model starts with
    an empty one.

    Args:
        loss: The wrapped `MetricLoss`, one that mines pairs
            (`per_anchor_loss`: `TripletLoss`, `PNLoss`, `CircleLoss`,
            `MultiSimilarityLoss`, `SoftNearestNeighborLoss`, `SupConLoss`, or a
            `MetricLoss(fn)` of a 0.17 loss function),
            or its serialised config. Its `reduction` is not used.
        memory_size: Number of (label, embedding) pairs kept, a positive
            integer.
        warmup_steps: Number of first calls that use and fill no memory.
            Defaults to `0`.
        reduction: See `MetricLoss`.
        name: Name of the loss. Defaults to `None`, which names it `"XBM"`.
        dtype: See `MetricLoss`; also the dtype of the stored embeddings.

    The positional order is 0.17's: `XBM(loss, memory_size, warmup_steps,
    reduction, name)`.

    Returns (when called):
        A scalar, or per-anchor values with `reduction="none"`.

    Raises:
        ValueError: On a `loss` that is not a pair-mining `MetricLoss`, a
            `memory_size` or `warmup_steps` that is not a positive / non-
            negative integer, bad inputs (see `MetricLoss`), or when called
            under a strategy other than the one in whose scope it was created.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.losses import XBM, MultiSimilarityLoss
    >>> loss = XBM(MultiSimilarityLoss(), memory_size=8)
    >>> labels = np.array([0, 0, 1, 1])
    >>> embeddings = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [0.6, 0.8]])
    >>> first = float(loss(labels, embeddings))  # the memory now holds this batch
    >>> int(loss.memory_count.numpy())
    4
    """

    def __init__(
        self,
        loss: MetricLoss | dict,
        memory_size: int,
        warmup_steps: int = 0,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = None,
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        if isinstance(loss, dict):
            loss = keras.saving.deserialize_keras_object(loss)
        # A MetricLoss(fn) (0.17's custom loss) mines through its function.
        if not isinstance(loss, MetricLoss) or (
            type(loss).per_anchor_loss is MetricLoss.per_anchor_loss and loss.fn is None
        ):
            raise ValueError(
                f"{owner} wraps a MetricLoss that mines pairs of anchors and keys "
                f"(one implementing per_anchor_loss, such as TripletLoss or "
                f"MultiSimilarityLoss, or a MetricLoss(fn)). Received loss={loss!r}."
            )
        self.loss = loss
        self.memory_size = check_int("memory_size", memory_size, minimum=1, owner=owner)
        self.warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0, owner=owner)
        super().__init__(
            distance=loss.distance,
            name="XBM" if name is None else name,
            reduction=reduction,
            dtype=dtype,
        )
        # Updated with the same global batch on every replica: taking the first
        # replica's value keeps the copies identical at the cost of no reduction.
        variable = {"trainable": False, "aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA}
        # Flat, [memory_size * d] once filled: the feature size is unknown until
        # the first call, and a [memory_size, None] variable starting empty
        # misleads Grappler's shape inference into dropping the reshape below.
        self.memory_embeddings = tf.Variable(
            tf.zeros([0], computation_dtype(self.dtype)),
            shape=tf.TensorShape([None]),
            name="xbm_memory_embeddings",
            **variable,
        )
        self.memory_labels = tf.Variable(
            tf.zeros([self.memory_size], tf.int64), name="xbm_memory_labels", **variable
        )
        self.memory_count = tf.Variable(
            tf.constant(0, tf.int64), name="xbm_memory_count", **variable
        )
        self.steps = tf.Variable(tf.constant(0, tf.int64), name="xbm_steps", **variable)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> tf.Tensor:
        ctx = collectives.sync_replica_context()
        if ctx is not None and not ctx.strategy.extended.variable_created_in_scope(self.steps):
            raise ValueError(
                f"{type(self).__name__} {self.name!r} holds its memory in variables created "
                "outside this strategy's scope, so the replicas cannot share it. Create the "
                "loss inside strategy.scope() (e.g. in model.compile under the scope)."
            )
        return super().__call__(y_true, y_pred, sample_weight)

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's anchors against global batch and memory.

        `y_true` are the anchors' labels, `y_pred` their embeddings (0.17's names).
        """
        labels, embeddings = y_true, y_pred
        # The memory takes the global batch in replica order, the same on every
        # replica; the keys put this replica's own rows first (`gather_keys`).
        (batch_labels, batch_embeddings), mine = gather_with_owner(labels, embeddings)
        labels_first, embeddings_first = own_rows_first(
            (labels, embeddings), (batch_labels, batch_embeddings), mine
        )
        size = self.memory_size
        n = tf.shape(batch_labels, out_type=tf.int64)[0]
        in_use = self.steps >= self.warmup_steps
        count = tf.convert_to_tensor(self.memory_count)
        stored_labels = tf.convert_to_tensor(self.memory_labels)
        # Rows past `count` are padding; before the first update the variable
        # is empty, and the pad gives it its rows.
        stored = tf.reshape(self.memory_embeddings, [-1, tf.shape(embeddings)[1]])
        stored = tf.pad(stored, [[0, size - tf.shape(stored)[0]], [0, 0]])

        kept = tf.where(in_use, tf.minimum(count, tf.maximum(size - n, 0)), 0)
        key_labels = tf.concat([labels_first, stored_labels[:kept]], axis=0)
        key_embeddings = tf.concat(
            [embeddings_first, tf.stop_gradient(tf.cast(stored[:kept], embeddings.dtype))], axis=0
        )
        terms = self.loss.per_anchor_loss(labels, embeddings, key_labels, key_embeddings)

        new = tf.stop_gradient(tf.cast(batch_embeddings, stored.dtype))
        new_labels = tf.concat([batch_labels, stored_labels], axis=0)[:size]
        updates = [
            (
                self.memory_embeddings,
                tf.reshape(tf.concat([new, stored], axis=0)[:size], [-1]),
                tf.reshape(stored, [-1]),
            ),
            (self.memory_labels, new_labels, stored_labels),
            (self.memory_count, tf.minimum(count + n, size), count),
        ]
        for variable, updated, unchanged in updates:
            variable.assign(tf.where(in_use, updated, unchanged))
        self.steps.assign_add(1)
        return terms

    def memory(self) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns the stored `([count] labels, [count, d] embeddings)`, the newest first."""
        count = tf.cast(self.memory_count, tf.int32)
        size = tf.size(self.memory_embeddings)
        d = tf.math.floordiv(size, self.memory_size)
        embeddings = tf.reshape(self.memory_embeddings, [self.memory_size, d])
        return self.memory_labels[:count], embeddings[:count]

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            loss=keras.saving.serialize_keras_object(self.loss),
            memory_size=self.memory_size,
            warmup_steps=self.warmup_steps,
        )
        return config
