"""`ProxyLoss`: the base of the metric losses with one trained proxy per class."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity import collectives
from tensorflow_similarity._validation import check_int
from tensorflow_similarity.losses.global_batch import computation_dtype
from tensorflow_similarity.losses.metric_loss import MetricLoss


class _ProxyWeights(keras.layers.Layer):
    """The `[num_classes, embedding_size]` proxies of a `ProxyLoss`, held as a layer's weight.

    A layer, so that a model can track it: `SimilarityModel.compile` attaches
    the loss's `weights_layer` to the model, which puts the proxies among the
    model's trainable weights (the optimizer updates them) and in its saved
    file. It is built when made and is never called.

    Args:
        num_classes: Number of proxies, one per class.
        embedding_size: Size of each proxy, that of the embeddings.
        initializer: Keras initializer of the proxies.
        dtype: Dtype of the proxies.
        name: Name of the layer.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_size: int,
        initializer: Any,
        dtype: Any = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name=name, dtype=dtype, trainable=True)
        self.proxies = self.add_weight(
            shape=(num_classes, embedding_size),
            initializer=initializer,
            name="proxies",
            trainable=True,
        )
        self.built = True

    def call(self, inputs: Any) -> Any:
        raise TypeError(
            f"{self.name!r} holds a proxy loss's proxies and is not called on data; the loss "
            "reads its weight."
        )


@keras.saving.register_keras_serializable(package="Similarity")
class ProxyLoss(MetricLoss):
    """Base class of the metric losses that compare samples with one trained proxy per class.

    Called as `loss(labels, embeddings)`, as every `MetricLoss`, with labels
    in `[0, num_classes)` and `[n, embedding_size]` embeddings. The proxies
    are a `[num_classes, embedding_size]` trainable weight of the loss
    (`loss.proxies`), held by a layer (`loss.weights_layer`) and created with
    the loss from the number of classes and the embedding size: create the
    loss inside `strategy.scope()` when training under a strategy, so that
    the proxies are mirrored. `SimilarityModel.compile` adds that layer to
    the model, so that `fit` trains the proxies with the model's other
    weights and `save` / `keras.saving.load_model` keep them; with another
    Keras model, assign the layer to one of the model's attributes before
    compiling (`model.proxy_weights = loss.weights_layer`), or the proxies
    are not trained.

    Subclasses implement `call(labels, embeddings)` with the proxies.

    Args:
        num_classes: Number of classes, at least 2: labels lie in
            `[0, num_classes)`.
        embedding_size: Size of the embeddings and the proxies.
        proxy_initializer: Keras initializer of the proxies (its name, an
            instance or a config).
        name: Name of the loss.
        reduction: See `GlobalBatchLoss`.
        dtype: See `MetricLoss`. The proxies are kept in this dtype promoted
            to at least float32.

    Raises:
        ValueError: On a bad `num_classes` or `embedding_size`; when called,
            on embeddings whose size is not `embedding_size`, on labels
            outside `[0, num_classes)` (raised before any computation; in a
            graph, a run-time check that gates the loss), or under a
            strategy whose scope did not create the proxies.
    """

    def __init__(
        self,
        num_classes: int,
        embedding_size: int,
        proxy_initializer: Any = "he_normal",
        name: str | None = None,
        reduction: str | None = "sum_over_batch_size",
        dtype: Any = None,
    ) -> None:
        owner = type(self).__name__
        self.num_classes = check_int(
            "num_classes",
            num_classes,
            minimum=2,
            owner=owner,
            hint="A proxy loss compares each sample with one proxy per class.",
        )
        self.embedding_size = check_int("embedding_size", embedding_size, minimum=1, owner=owner)
        self.proxy_initializer = keras.initializers.get(proxy_initializer)
        super().__init__(name=name, reduction=reduction, dtype=dtype, distance="cosine")
        self.weights_layer = _ProxyWeights(
            self.num_classes,
            self.embedding_size,
            self.proxy_initializer,
            dtype=computation_dtype(self.dtype),
            name=f"{self.name}_proxies",
        )

    @property
    def proxies(self) -> keras.Variable:
        """The `[num_classes, embedding_size]` trainable proxies."""
        return self.weights_layer.proxies

    @property
    def trainable_weights(self) -> list[keras.Variable]:
        """The loss's trainable weights: `[proxies]`."""
        return self.weights_layer.trainable_weights

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> tf.Tensor:
        ctx = collectives.sync_replica_context()
        if ctx is not None and not ctx.strategy.extended.variable_created_in_scope(
            self.proxies.value
        ):
            raise ValueError(
                f"{type(self).__name__} {self.name!r} holds its proxies in a variable created "
                "outside this strategy's scope, so the replicas cannot train one copy. Create "
                "the loss inside strategy.scope() (e.g. compile the model under the scope)."
            )
        return super().__call__(y_true, y_pred, sample_weight)

    def check_inputs(self, y_true: Any, y_pred: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """`MetricLoss.check_inputs`, and the embedding size and label range.

        Raises:
            ValueError: On embeddings whose size is not `embedding_size`, or
                (eagerly) labels outside `[0, num_classes)`.
            tf.errors.InvalidArgumentError: On labels outside
                `[0, num_classes)` in a graph, before the loss is computed.
        """
        labels, embeddings = super().check_inputs(y_true, y_pred)
        name = type(self).__name__
        size = embeddings.shape[-1]
        if size is not None and size != self.embedding_size:
            raise ValueError(
                f"{name} was made for embeddings of size embedding_size={self.embedding_size}, "
                f"and received embeddings of shape {embeddings.shape}. Pass the model's "
                "embedding size as embedding_size."
            )
        if tf.executing_eagerly():
            self.check_labels(labels.numpy())
            return labels, embeddings
        message = self._labels_message()
        checks = [
            tf.debugging.assert_non_negative(labels, message=message),
            tf.debugging.assert_less(
                labels, tf.constant(self.num_classes, labels.dtype), message=message
            ),
        ]
        with tf.control_dependencies([c for c in checks if c is not None]):
            return tf.identity(labels), tf.identity(embeddings)

    def check_labels(self, labels: Any) -> None:
        """Raises `ValueError` unless every label lies in `[0, num_classes)`.

        `SimilarityModel.fit` calls it on labels given as an array, before
        training; the loss calls it on eager labels and checks graph labels
        at run time.

        Args:
            labels: Integer class labels, of any shape.

        Raises:
            ValueError: Naming the class count and the labels outside it.
        """
        values = np.asarray(labels)
        if not values.size or not np.issubdtype(values.dtype, np.integer):
            return
        outside = np.unique(values[(values < 0) | (values >= self.num_classes)])
        if outside.size:
            raise ValueError(f"{self._labels_message()} Labels outside: {outside[:10].tolist()}.")

    def _labels_message(self) -> str:
        return (
            f"{type(self).__name__} has num_classes={self.num_classes} proxies, for labels in "
            f"[0, {self.num_classes}), and received a label outside that range. Pass the "
            "number of classes of the training labels (largest label + 1) as num_classes."
        )

    def proxies_like(self, embeddings: tf.Tensor) -> tf.Tensor:
        """Returns this replica's proxies in the embeddings' computation dtype."""
        return tf.cast(tf.convert_to_tensor(self.proxies), embeddings.dtype)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            num_classes=self.num_classes,
            embedding_size=self.embedding_size,
            proxy_initializer=keras.initializers.serialize(self.proxy_initializer),
        )
        return config
