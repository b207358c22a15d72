"""The base class of the supervised metric losses, mined over the global batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.collectives import gather_keys
from tensorflow_similarity.distances import Distance, distance_canonicalizer
from tensorflow_similarity.losses.global_batch import GlobalBatchLoss, computation_dtype
from tensorflow_similarity.losses.mining import pair_masks


def _keras_distributed_build(labels: tf.Tensor) -> bool:
    """Whether these float labels come from Keras' symbolic build under a strategy.

    Before the first step of `fit` under a strategy, Keras 3 builds the
    compiled loss in the cross-replica context on the replicas' batches
    reduced with MEAN, which turns integer labels into floats. Only the
    output's spec is used, so such labels are accepted there (and cast);
    anywhere else float labels are an error.
    """
    return (
        labels.dtype.is_floating
        and tf.distribute.has_strategy()
        and tf.distribute.in_cross_replica_context()
    )


@keras.saving.register_keras_serializable(package="Similarity")
class MetricLoss(GlobalBatchLoss):
    """Base class of the losses of labelled embeddings: `loss(labels, embeddings)`.

    Called as `loss(y_true=labels, y_pred=embeddings)` with `[n]` or `[n, 1]`
    integer class labels and `[n, d]` embeddings. Subclasses implement
    `per_anchor_loss(query_labels, query_embeddings, key_labels,
    key_embeddings)`, returning one term per anchor (query) against the keys,
    whose first rows are the anchors themselves; the base checks the inputs,
    gathers the global batch and reduces. An anchor that has no positive (or,
    for the losses that need one, no negative) among the keys contributes 0,
    so a batch in which no anchor has a positive has loss 0, never NaN; the
    mean is taken over all anchors, those included (0.17's convention).
    Losses are computed in at least float32, so float16 and bfloat16
    embeddings (mixed precision) give finite values.

    Global batch (the contract of `GlobalBatchLoss`): in a replica context
    with `K > 1` replicas (under `tf.distribute`, e.g. inside Keras' `fit` in
    `strategy.scope()`), each replica computes the terms of its own anchors,
    mined against the labels and embeddings gathered from every replica
    (differentiably; replicas may hold different numbers of samples, none
    included), exactly as one device holding the concatenated batch would.
    Any Keras model compiled with the loss gets global mining; no custom
    training step is needed.

    Under `MultiWorkerMirroredStrategy`, Keras 3's `fit` cannot take
    `(x, y)` batches (keras-team/keras#20585): before the first step it
    reduces the distributed batch with `strategy.reduce("MEAN", (x, y))`,
    which that strategy rejects for a tuple ("Attempt to convert a value
    (PerReplica...) with an unsupported type"), and it reduces the step's
    logs with `axis=0`, which fails on scalars. Two paths work, with the
    same global-batch result: a custom training loop (`strategy.run` of a
    step that calls the loss and `optimizer.apply_gradients`), or `fit` on
    batches packing features and label into one tensor, with a `train_step`
    that unpacks them, calls `super().train_step((x, y))` and reshapes the
    logs to `[1]`, and with the compiled loss built before `fit` (one
    `model.compute_loss(y=..., y_pred=...)` call), since `fit`'s build would
    call the model on the packed batch.

    A loss function can also be wrapped without subclassing, 0.17's way:
    `MetricLoss(fn, reduction, name, **kwargs)` calls
    `fn(query_labels, query_embeddings, key_labels, key_embeddings, **kwargs)`
    (with `distance=` among the keyword arguments when one is given, as a
    `Distance`) with this replica's samples as queries and the global batch
    as keys, the first rows of the keys being the queries, as 0.17's
    functional losses (`triplet_loss`, `pn_loss`, ...) take them. It must return one term per
    query, `[n]` or `[n, 1]`; the labels reach it as `[n]` int64, the
    embeddings in the computation dtype.

    Args:
        fn: `None` for a subclass implementing `per_anchor_loss`, or a loss
            function as above. Defaults to `None`.
        reduction: `"sum_over_batch_size"` (default): the mean over the
            global batch's anchors (divided by `K` on each of `K > 1`
            replicas); `"sum"`: the sum of this replica's anchors' terms;
            `"none"` or `None`: the `[n_k]` terms of this replica's anchors,
            in their input order. See `GlobalBatchLoss`. `"auto"` (0.17's
            default) means `"sum_over_batch_size"`.
        name: Name of the loss.
        distance: The `Distance` between embeddings: an instance, a name or
            its serialised config; `None` for losses that use none.
        dtype: Dtype of the result of Keras' loss wrapper; the computation
            itself runs in the embeddings' dtype promoted to at least float32.
        **kwargs: With `fn`, passed to it on every call; without, none is
            accepted.

    Raises:
        ValueError: On labels that are not integers of shape `[n]` or
            `[n, 1]`, embeddings that are not `[n, d]`, labels and embeddings
            of different lengths (checked at run time when unknown while
            tracing), an unknown distance, when `sample_weight` is given, or
            when `fn` returns other than one term per query.
        TypeError: If `fn` is not callable, or keyword arguments are given
            without `fn`.

    Example:

    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.losses import MetricLoss
    >>> def spread(query_labels, query_embeddings, key_labels, key_embeddings, distance):
    ...     return tf.reduce_mean(distance(query_embeddings, key_embeddings), axis=1)
    >>> loss = MetricLoss(spread, distance="l2")
    >>> float(loss(np.array([0, 1]), np.array([[0.0, 0.0], [3.0, 4.0]])))
    2.5
    """

    # The anchor itself is not its own positive; 0.17's `remove_diagonal=False`
    # (accepted by the losses 0.17 gave it to) sets this to False.
    remove_diagonal: bool = True

    def __init__(
        self,
        fn: Callable[..., Any] | dict | None = None,
        reduction: str | None = "sum_over_batch_size",
        name: str | None = None,
        *,
        distance: Distance | str | dict | None = None,
        dtype: Any = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(fn, dict):
            fn = keras.saving.deserialize_keras_object(fn)
        if fn is not None and (not callable(fn) or isinstance(fn, Distance)):
            raise TypeError(
                f"MetricLoss's first argument is a loss function fn(query_labels, "
                f"query_embeddings, key_labels, key_embeddings, **kwargs) (0.17's order). "
                f"Received fn={fn!r}; pass a distance as distance=..."
            )
        if fn is None and kwargs:
            raise TypeError(
                f"{type(self).__name__} got unexpected keyword arguments {sorted(kwargs)}: "
                "keyword arguments are passed to a wrapped loss function, and there is none "
                "(MetricLoss(fn, ...))."
            )
        if isinstance(distance, dict):
            distance = keras.saving.deserialize_keras_object(distance)
        self.distance = None if distance is None else distance_canonicalizer(distance)
        self.fn = fn
        self._fn_kwargs = dict(kwargs)
        if fn is not None and self.distance is not None:
            self._fn_kwargs["distance"] = self.distance
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def per_anchor_loss(
        self,
        query_labels: tf.Tensor,
        query_embeddings: tf.Tensor,
        key_labels: tf.Tensor,
        key_embeddings: tf.Tensor,
    ) -> tf.Tensor:
        """Returns the `[n]` loss terms of the anchors (queries) against the keys.

        Args:
            query_labels: `[n]` int64 labels of the anchors.
            query_embeddings: `[n, d]` anchor embeddings, float32 or wider.
            key_labels: `[m]` int64 labels of the keys; the first `n` keys are
                the anchors.
            key_embeddings: `[m, d]` key embeddings.
        """
        if self.fn is None:
            raise NotImplementedError(f"{type(self).__name__} must implement per_anchor_loss.")
        terms = tf.convert_to_tensor(
            self.fn(query_labels, query_embeddings, key_labels, key_embeddings, **self._fn_kwargs)
        )
        n = query_labels.shape[0]
        if terms.shape.num_elements() is not None and n is not None:
            if terms.shape.num_elements() != n:
                raise ValueError(
                    f"The loss function {getattr(self.fn, '__name__', self.fn)!r} returned a "
                    f"tensor of shape {terms.shape} for {n} queries. Return one term per "
                    "query, of shape [n] or [n, 1]."
                )
        return tf.reshape(terms, tf.shape(query_labels))

    def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
        """Returns the `[n]` terms of this replica's anchors against the global batch.

        `y_true` are the anchors' labels, `y_pred` their embeddings; on one
        device the keys are the batch itself.
        """
        key_labels, key_embeddings = gather_keys(y_true, y_pred)
        return self.per_anchor_loss(y_true, y_pred, key_labels, key_embeddings)

    def pair_masks(
        self, query_labels: tf.Tensor, key_labels: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Returns the positive and negative pair masks.

        The anchor itself is not among its positives, unless the loss was
        built with 0.17's `remove_diagonal=False`.
        """
        positive, negative = pair_masks(query_labels, key_labels)
        if not self.remove_diagonal:
            positive = tf.logical_not(negative)
        return positive, negative

    def check_inputs(self, y_true: Any, y_pred: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Checks labels and embeddings before any work; returns them ready to use.

        Returns:
            `[n]` int64 labels and `[n, d]` embeddings in the computation
            dtype, gated in a graph on a run-time length check when the trace
            leaves the lengths unknown.
        """
        name = type(self).__name__
        if y_true is None:
            raise ValueError(
                f"{name} needs the class labels as y_true, received None. Pass the labels "
                "as y to fit() (e.g. fit(x, y) or a dataset of (x, y) pairs)."
            )
        labels = tf.convert_to_tensor(y_true)
        embeddings = tf.convert_to_tensor(y_pred)
        if not labels.dtype.is_integer and not _keras_distributed_build(labels):
            raise ValueError(
                f"{name} expects integer class labels as y_true, received dtype "
                f"{labels.dtype.name}. Cast the labels to int32 or int64 (class ids)."
            )
        if not embeddings.dtype.is_floating:
            raise ValueError(
                f"{name} expects floating-point embeddings as y_pred, received dtype "
                f"{embeddings.dtype.name}."
            )
        if len(embeddings.shape) != 2:
            raise ValueError(
                f"{name} expects embeddings of shape [batch, features] as y_pred. Received "
                f"shape {embeddings.shape}. Flatten or pool the embeddings first."
            )
        if len(labels.shape) == 2 and labels.shape[1] == 1:
            labels = labels[:, 0]
        if len(labels.shape) != 1:
            raise ValueError(
                f"{name} expects labels of shape [batch] or [batch, 1] as y_true. Received "
                f"shape {labels.shape}. Pass one integer class id per embedding."
            )
        n_labels, n_embeddings = labels.shape[0], embeddings.shape[0]
        if n_labels is not None and n_embeddings is not None and n_labels != n_embeddings:
            raise ValueError(
                f"{name} expects one label per embedding. Received {n_labels} labels for "
                f"{n_embeddings} embeddings."
            )
        labels = tf.cast(labels, tf.int64)
        embeddings = tf.cast(embeddings, computation_dtype(embeddings.dtype))
        if n_labels is None or n_embeddings is None:
            check = tf.debugging.assert_equal(
                tf.shape(labels)[0],
                tf.shape(embeddings)[0],
                message=f"{name} expects one label per embedding.",
            )
            with tf.control_dependencies([check] if check is not None else []):
                labels, embeddings = tf.identity(labels), tf.identity(embeddings)
        return labels, embeddings

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["dtype"] = self.dtype
        if self.fn is not None:
            config["fn"] = keras.saving.serialize_keras_object(self.fn)
            for key, value in self._fn_kwargs.items():
                if isinstance(value, Distance):
                    value = keras.saving.serialize_keras_object(value)
                elif isinstance(value, (tf.Tensor, tf.Variable)):
                    value = value.numpy().tolist()
                config[key] = value
        return config

    def distance_config(self) -> dict[str, Any]:
        """Returns the distance as plain config values, for subclasses' `get_config`."""
        return {"distance": keras.saving.serialize_keras_object(self.distance)}


def anchor_terms(
    loss: MetricLoss,
    query_labels: Any,
    query_embeddings: Any,
    key_labels: Any,
    key_embeddings: Any,
) -> tf.Tensor:
    """Returns `loss.per_anchor_loss` of 0.17-style arguments: the `[n]` terms of the queries.

    The functional losses (`triplet_loss`, `pn_loss`, ...) are this over
    their class: labels `[n]` or `[n, 1]` of any integer dtype, embeddings
    of any float dtype (computed in at least float32), the first keys being
    the queries. Nothing is gathered across replicas.
    """
    query_labels = tf.cast(tf.reshape(tf.convert_to_tensor(query_labels), [-1]), tf.int64)
    key_labels = tf.cast(tf.reshape(tf.convert_to_tensor(key_labels), [-1]), tf.int64)
    query_embeddings = tf.convert_to_tensor(query_embeddings)
    dtype = computation_dtype(query_embeddings.dtype)
    query_embeddings = tf.cast(query_embeddings, dtype)
    key_embeddings = tf.cast(tf.convert_to_tensor(key_embeddings), dtype)
    return loss.per_anchor_loss(query_labels, query_embeddings, key_labels, key_embeddings)
