"""A Functional Keras model whose outputs are embeddings, with an index to search them."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.distances import Distance
from tensorflow_similarity.evaluators import Evaluator, check_clustering_labels, clustering_metrics
from tensorflow_similarity.models.cached_embeddings import cached_embedding_step, check_chunk_size
from tensorflow_similarity.models.index import IndexMixin, canonical_distance
from tensorflow_similarity.models.non_finite import (
    fit_arguments,
    nan_unless_finite,
    warn_if_one_class,
)
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store


@keras.saving.register_keras_serializable(package="Similarity")
class SimilarityModel(IndexMixin, keras.Model):
    """A Functional model trained with a metric loss, whose embeddings it indexes and searches.

    Training is Keras' own: `compile(optimizer, loss)` then `fit(x, y)`, under
    any `tf.distribute` strategy (the metric losses are `keras.losses.Loss`
    subclasses called as `loss(labels, embeddings)`). `compile` also creates
    the index (distance, search, store, evaluator), through which the model
    indexes examples and answers `lookup`, `calibrate`, `match` and
    `evaluate_retrieval` (see `IndexMixin`). Embedding runs `predict`, on
    every replica of the strategy the model was built under; the index lives
    on the host, so these work inside and outside `strategy.scope()`.

    `save("model.keras")` writes the Keras file and, beside it, the index
    (`model.index/`); `keras.saving.load_model` rebuilds a `SimilarityModel`
    (compiled, with an empty index of the saved settings) without
    `custom_objects`, and `load_index("model.keras")` restores its index.

    Args:
        inputs: The model's input tensor(s), as for a Functional model; with
            `outputs`, `None` (the default) for a subclass that sets its
            layers and `call` itself (0.17's `SimilarityModel()` style), whose
            index is made once it is built.
        outputs: Its output tensor(s): the embeddings (or several outputs,
            then `embedding_output` of `compile` picks one).
        name: The model's name.
        chunk_size: Keyword-only. `None` (the default) trains as Keras does;
            an integer trains with cached embeddings: each replica embeds
            its batch `chunk_size` samples at a time, twice, and never holds
            more than one chunk's activations, while the loss and every
            gradient stay those of one pass over the whole batch (see
            `train_step`). It must divide each replica's batch.
        **kwargs: Other `keras.Model` arguments.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tensorflow_similarity.layers import MetricEmbedding
    >>> from tensorflow_similarity.losses import MultiSimilarityLoss
    >>> from tensorflow_similarity.models import SimilarityModel
    >>> rng = np.random.default_rng(0)
    >>> x_train, y_train = rng.random((32, 8, 8, 3)), np.arange(32) % 4
    >>> x_val, y_val = rng.random((8, 8, 8, 3)), np.arange(8) % 4
    >>> inputs = keras.Input((8, 8, 3))
    >>> x = keras.layers.Flatten()(inputs)
    >>> model = SimilarityModel(inputs, MetricEmbedding(16)(x))
    >>> model.compile("adam", loss=MultiSimilarityLoss(), distance="cosine")
    >>> history = model.fit(x_train, y_train, epochs=2, verbose=0)
    >>> model.index(x_train, y_train, data=x_train, verbose=0)
    >>> calibration = model.calibrate(x_val, y_val, verbose=0)
    >>> len(model.match(x_val[:4]))
    4
    """

    def __init__(
        self,
        inputs: Any = None,
        outputs: Any = None,
        name: str | None = None,
        *,
        chunk_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        # Checked first: a bad chunk_size is refused before any layer is built.
        chunk_size = check_chunk_size(chunk_size, owner="SimilarityModel")
        if inputs is None and outputs is None:
            # 0.17's subclass style: `super().__init__()`, layers set in the subclass's
            # __init__ and its own `call`. Keras makes a class Functional (for good) when
            # one of its models is built with inputs and outputs.
            if any(c.__name__ == "Functional" for c in type(self).__mro__):
                raise TypeError(
                    f"{type(self).__name__}() without inputs and outputs is a subclass-style "
                    "model, but a SimilarityModel was built with inputs and outputs in this "
                    "process, and Keras then made the class Functional. Build subclass-style "
                    "models in a process that builds no Functional SimilarityModel, or build "
                    "this one as SimilarityModel(inputs, outputs)."
                )
            super().__init__(name=name, **kwargs)
        else:
            super().__init__(inputs, outputs, name=name, **kwargs)
        self._ix = None
        self._index_settings: dict[str, Any] | None = None
        self.chunk_size = chunk_size

    def compile(
        self,
        optimizer: Any = "rmsprop",
        loss: Any = None,
        metrics: Any = None,
        loss_weights: Any = None,
        weighted_metrics: Any = None,
        run_eagerly: bool = False,
        steps_per_execution: int = 1,
        distance: Distance | str = "auto",
        embedding_output: int | None = None,
        kv_store: Store | str = "memory",
        search: Search | str = "linear",
        evaluator: Evaluator | str = "memory",
        stat_buffer_size: int = 1000,
        **kwargs: Any,
    ) -> None:
        """`keras.Model.compile`, then `create_index` with the index arguments.

        Args:
            optimizer: As for `keras.Model.compile`.
            loss: As for `keras.Model.compile`: a metric loss such as
                `MultiSimilarityLoss()`, called as `loss(labels, embeddings)`.
            metrics: As for `keras.Model.compile`.
            loss_weights: As for `keras.Model.compile`.
            weighted_metrics: As for `keras.Model.compile`.
            run_eagerly: As for `keras.Model.compile`. Defaults to `False`.
            steps_per_execution: As for `keras.Model.compile`. Defaults to 1.
            distance: The index's `Distance` or its name. `"auto"` (the
                default, as in 0.17) takes the `distance` of the loss (of the
                embedding output's loss when `loss` is a list or dict), and
                cosine when the loss has none (`None`, a Keras loss).
            embedding_output: Which output holds the embeddings (multi-output
                models). Defaults to `None` (output 0).
            kv_store: `"memory"` or a `Store`. Defaults to `"memory"`.
            search: `"linear"` or a `Search`. Defaults to `"linear"`.
            evaluator: `"memory"` or an `Evaluator`. Defaults to `"memory"`.
            stat_buffer_size: Lookup timings kept for `index_summary`.
            **kwargs: Other `keras.Model.compile` arguments.

        A loss with trainable weights (the proxies of `ProxyAnchorLoss` and
        `ProxyNCALoss`, held by its `weights_layer`) has them trained with
        the model's: they are among `trainable_weights`, and `save` and
        `keras.saving.load_model` keep them.

        Raises:
            ValueError: For a bad index argument (checked before Keras
                compiles), or what `keras.Model.compile` raises. A model
                whose output is not `[batch, dim]` embeddings compiles
                without an index; its index API raises.
        """
        distance = canonical_distance(self._auto_distance(distance, loss, embedding_output), loss)
        unbuilt = not self.built and not hasattr(self, "outputs")
        # A subclassed model not yet built gets its index, with these settings, when first used.
        self._compile_index(
            not unbuilt and len(self._embedding_output(embedding_output).shape) == 2,
            distance,
            search,
            kv_store,
            evaluator,
            stat_buffer_size,
            embedding_output=embedding_output,
        )
        self._track_loss_weights(loss)
        super().compile(
            optimizer=optimizer,
            loss=loss,
            metrics=metrics,
            loss_weights=loss_weights,
            weighted_metrics=weighted_metrics,
            run_eagerly=run_eagerly,
            steps_per_execution=steps_per_execution,
            **kwargs,
        )

    def fit(
        self,
        x: Any = None,
        y: Any = None,
        *args: Any,
        callbacks: Any = None,
        stop_on_non_finite: bool = True,
        **kwargs: Any,
    ) -> keras.callbacks.History:
        """`keras.Model.fit`, stopped with an error at the first non-finite loss.

        A step whose inputs or weights are not finite reports a NaN loss
        (see `non_finite.nan_unless_finite`: a max pooling can hide a NaN
        from the loss while the gradients carry it), and a
        `StopOnNonFinite` callback, placed before `callbacks`, turns the
        first non-finite loss (each step) or weight (each epoch's end) into
        `TrainingDiverged`, where Keras' `TerminateOnNaN` stops silently.

        Labels given as an array or tensor holding one class warn: a metric
        loss needs at least two classes (it is 0 or constant otherwise).
        Labels inside a dataset are not read ahead to check.

        Args:
            x: As for `keras.Model.fit`.
            y: As for `keras.Model.fit`.
            *args: Other positional `keras.Model.fit` arguments.
            callbacks: As for `keras.Model.fit`.
            stop_on_non_finite: Whether to add a `StopOnNonFinite` (when
                `callbacks` holds none). Defaults to `True`; `False` trains
                on as Keras does (the loss still reads NaN).
            **kwargs: Other `keras.Model.fit` arguments.

        Returns:
            The `History` of `keras.Model.fit`.

        Raises:
            TrainingDiverged: At the first non-finite loss or weight, naming
                the epoch and step.
            TypeError: When `stop_on_non_finite` is not a bool (before
                training).
        """
        # After y, Keras' order is batch_size, epochs, verbose, callbacks.
        args, keywords = fit_arguments(args, 3, callbacks, stop_on_non_finite)
        warn_if_one_class(y)
        self._check_labels_for_losses(y)
        return super().fit(x, y, *args, **keywords, **kwargs)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        if self.chunk_size is not None:
            config["chunk_size"] = self.chunk_size
        return config

    def train_step(self, data: Any) -> dict[str, Any]:
        """Keras' training step; with `chunk_size`, the cached-embedding step.

        With `chunk_size=C` each replica splits its batch into chunks of `C`
        samples (`C` must divide the replica's batch) and runs
        `cached_embeddings.cached_embedding_step`: it embeds the chunks one
        after the other without recording gradients, takes the loss
        (`compute_loss`, on the whole batch's embeddings; a `GlobalBatchLoss`
        gathers the replicas' embeddings as in one pass) and its gradient
        with respect to the embeddings and to the loss's own weights (the
        proxies of `ProxyAnchorLoss`), then embeds each chunk again under a
        tape and backpropagates its rows of that gradient. For a model whose
        embedding of a sample depends on that sample alone, the loss, every
        gradient and so the optimizer's step are those of one pass over the
        batch, on one device and across replicas.

        Non-trainable state (seed states, moving statistics) is restored
        between the passes, so that dropout and Keras' random layers draw
        the same values in both. Batch normalisation normalises each chunk
        with that chunk's statistics (the replica's chunk; with
        `SyncBatchNormalization`, the replicas' chunks together) and updates
        its moving statistics once per chunk, in order. A synchronised
        batch norm in chunks needs batches of one static size
        (`drop_remainder=True`): see `cached_embedding_step`.

        The loss must be a function of the labels and the embeddings: a
        model that adds losses in its forward pass (`activity_regularizer`,
        `add_loss` in `call`) is refused, because each pass holds one
        chunk's activations only. Weight regularisation is fine.

        Raises:
            ValueError: When the forward pass adds losses, or `chunk_size`
                does not divide a static replica batch (both when the step
                is traced, before it runs).
            tf.errors.InvalidArgumentError: When `chunk_size` does not
                divide a replica batch known at run time (before any chunk
                runs).
        """
        if self.chunk_size is None:
            return super().train_step(data)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss_variables = {
            id(v) for layer in getattr(self, "_loss_weight_layers", []) for v in layer.variables
        }
        state = [v for v in self.non_trainable_variables if id(v) not in loss_variables]
        values = {}

        def embed(chunk: Any) -> Any:
            embeddings = self(chunk, training=True)
            self._refuse_forward_losses()
            return embeddings

        def loss_fn(y_pred: Any) -> tf.Tensor:
            loss = self.compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            values["loss"] = loss
            return self.optimizer.scale_loss(loss) if self.optimizer is not None else loss

        variables = self.trainable_variables
        step = cached_embedding_step(
            embed, x, loss_fn, self.chunk_size, variables, state=state, owner=self.name
        )
        # Keras' own train_step updates this tracker (Keras scales the loss of each
        # replica by 1 / replicas, so the tracker gets it unscaled).
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        loss = values["loss"]
        self._loss_tracker.update_state(
            loss * tf.cast(replicas, loss.dtype),
            sample_weight=tf.shape(tf.nest.flatten(x)[0])[0],
        )
        pairs = [(g, v) for g, v in zip(step.gradients, variables, strict=True) if g is not None]
        self.optimizer.apply_gradients(pairs)
        return self.compute_metrics(x, y, step.embeddings, sample_weight=sample_weight)

    def _refuse_forward_losses(self) -> None:
        """Raises when the last forward pass added losses besides weight regularisation."""
        regularized = sum(
            1 for v in self.trainable_weights if getattr(v, "regularizer", None) is not None
        )
        added = len(self.losses) - regularized
        if added > 0:
            layers = [
                layer.name
                for layer in _nested_layers(self)
                if getattr(layer, "activity_regularizer", None) is not None
            ]
            named = f" (activity_regularizer on {', '.join(layers)})" if layers else ""
            raise ValueError(
                f"{self.name!r} has chunk_size={self.chunk_size}, and its forward pass adds "
                f"{added} loss(es){named}. Cached embeddings take the loss of the labels and "
                "the embeddings only: a loss of the model's activations has no value on one "
                "chunk's activations that adds up to the batch's. Remove the activity "
                "regularizer or add_loss (weight regularizers are fine), or train without "
                "chunk_size."
            )

    def compute_loss(
        self,
        x: Any = None,
        y: Any = None,
        y_pred: Any = None,
        sample_weight: Any = None,
        training: bool = True,
    ) -> Any:
        """`keras.Model.compute_loss`, NaN in training when an input or weight is not finite."""
        loss = super().compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=training
        )
        if training and loss is not None:
            loss = nan_unless_finite(loss, x, self.weights)
        return loss

    def evaluate_clustering(
        self, x: Any, y: Any, seed: int = 0, batch_size: int | None = None
    ) -> dict[str, float]:
        """NMI and AMI of a k-means clustering of the embeddings of `x` against the labels `y`.

        Embeds `x` (`predict`), then `evaluators.clustering_metrics`: k-means
        with as many clusters as `y` has classes, seeded, against `y`. The
        index is not used.

        Args:
            x: The examples, as for `predict`.
            y: Their `[n]` integer class labels, at least two classes.
            seed: The k-means seed. Defaults to 0.
            batch_size: The batch size of the predictions. Defaults to the
                model's `index_batch_size`.

        Returns:
            `{"nmi": ..., "ami": ...}`, as Python floats.

        Raises:
            ValueError: On labels that are not integers or hold fewer than
                two classes, or a bad seed (before embedding), or what
                `clustering_metrics` raises on the embeddings.
        """
        check_clustering_labels(y, seed, owner="evaluate_clustering")
        predictions = self.predict(x, batch_size=batch_size or self.index_batch_size, verbose=0)
        if isinstance(predictions, dict):
            predictions = [predictions[name] for name in self.output_names]
        if isinstance(predictions, (list, tuple)):
            position = (self._index_settings or {}).get("embedding_output") or 0
            predictions = predictions[position]
        return clustering_metrics(predictions, y, seed=seed)

    def _track_loss_weights(self, loss: Any) -> None:
        """Makes the trainable weights of `loss` (of each of its losses) the model's.

        A loss holding weights keeps them in a Keras layer, its
        `weights_layer`; as an attribute of the model the layer is tracked,
        so its weights are trained, saved and loaded with the model's. A
        recompile replaces the losses' layers.
        """
        layers = [
            each.weights_layer
            for each in _each_loss(loss)
            if isinstance(getattr(each, "weights_layer", None), keras.layers.Layer)
        ]
        if hasattr(self, "_loss_weight_layers"):
            del self._loss_weight_layers
        if layers:
            self._loss_weight_layers = layers

    def _check_labels_for_losses(self, y: Any) -> None:
        """Lets a compiled loss that bounds the labels (`check_labels`) refuse them before fit.

        A proxy loss has one proxy per class, so a label past its class
        count is an error; labels given as an array or tensor are checked
        here, on the host, before anything is traced or trained (labels in
        a dataset are checked by the loss, before it computes).
        """
        if y is None or isinstance(y, (dict, list, tuple)) or not hasattr(y, "__array__"):
            return
        for each in _each_loss(getattr(self, "loss", None)):
            check = getattr(each, "check_labels", None)
            if callable(check):
                check(y)

    def _auto_distance(
        self, distance: Distance | str, loss: Any, embedding_output: int | None
    ) -> Distance | str:
        """`distance`, with `"auto"` replaced by the embedding loss's distance or `"cosine"`."""
        if not (isinstance(distance, str) and distance == "auto"):
            return distance
        position = embedding_output or 0
        if isinstance(loss, (list, tuple)):
            loss = loss[position] if position < len(loss) else None
        elif isinstance(loss, dict):
            names = list(self.output_names)
            loss = loss.get(names[position]) if position < len(names) else None
        found = getattr(loss, "distance", None)
        return "cosine" if found is None else found

    # IndexMixin hooks.

    def _embedding_output(self, embedding_output: int | None) -> keras.KerasTensor:
        if hasattr(self, "outputs"):
            outputs = self.outputs
        elif self.built and self.get_build_config():
            # A subclassed model: its outputs for the shape it was built with.
            input_shape = self.get_build_config()["input_shape"]
            spec = self.compute_output_spec(keras.KerasTensor(input_shape))
            outputs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
        else:
            raise ValueError(
                f"{self.name!r} is a subclassed model not built yet, so its embedding size is "
                "unknown. Call it on data first (fit, predict) or model.build(input_shape)."
            )
        if embedding_output is not None and not 0 <= embedding_output < len(outputs):
            raise ValueError(
                f"embedding_output={embedding_output} but {self.name!r} has {len(outputs)} "
                f"output(s). Pass an output number in [0, {len(outputs) - 1}]."
            )
        return outputs[embedding_output or 0]

    def _index_embedding_size(self, embedding_output: int | None) -> int:
        output = self._embedding_output(embedding_output)
        if len(output.shape) != 2 or output.shape[-1] is None:
            raise ValueError(
                f"The embedding output of {self.name!r} has shape {output.shape}; an index "
                "needs [batch, dim] embeddings of a known dim. Flatten or pool them first."
            )
        return int(output.shape[-1])

    def _index_embeddings(self, x: Any) -> Any:
        predictions = self.predict(x, batch_size=self.index_batch_size, verbose=0)
        if isinstance(predictions, dict):
            predictions = [predictions[name] for name in self.output_names]
        if isinstance(predictions, (list, tuple)) and self._index.embedding_output is None:
            predictions = predictions[0]
        return predictions

    def _index_input_shape(self) -> tuple[int | None, ...] | None:
        if not hasattr(self, "inputs") or len(self.inputs) != 1:
            return None
        return tuple(self.inputs[0].shape[1:])


def _each_loss(loss: Any) -> list[Any]:
    """The losses of a `compile(loss=...)` argument: one, or those of a list or dict."""
    if isinstance(loss, dict):
        return list(loss.values())
    if isinstance(loss, (list, tuple)):
        return list(loss)
    return [loss]


def _nested_layers(model: keras.Model) -> list[keras.layers.Layer]:
    """The layers of `model` and of the models among them, depth first."""
    found = []
    for layer in model.layers:
        found.append(layer)
        if isinstance(layer, keras.Model):
            found.extend(_nested_layers(layer))
    return found
