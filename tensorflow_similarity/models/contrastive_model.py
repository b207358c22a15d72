"""Self-supervised training of a backbone with two augmented views of each image."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity import losses
from tensorflow_similarity.collectives import global_sum
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin, resolve_sync_bn
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.models.heads import (
    ALGORITHMS,
    _check_algorithm,
    build_predictor,
    build_projector,
    get_predictor,
    get_projector,
)
from tensorflow_similarity.models.index_mixin import IndexMixin
from tensorflow_similarity.models.non_finite import fit_arguments, nan_unless_finite
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store

# 0.17's names here: its head builders (`get_projector`, `get_predictor`) live in `heads`.
__all__ = [
    "BN_EPSILON",
    "ContrastiveModel",
    "create_contrastive_model",
    "get_predictor",
    "get_projector",
]

_logger = logging.getLogger(__name__)

# 0.17's name: the batch-norm epsilon of its projector and predictor heads (ours keep
# Keras' default).
BN_EPSILON = 1.001e-5

# With `concat_views=None`, what each paper's reference implementation does: SimCLR's
# TensorFlow code feeds both views as one batch; SimSiam, Barlow Twins and VICReg call the
# encoder once per view, so batch norm normalises each view on its own.
_PAPER_CONCAT_VIEWS = {"simsiam": False, "simclr": True, "barlow": False, "vicreg": False}


def _default_loss(algorithm: str) -> keras.losses.Loss:
    return {
        "simsiam": losses.SimSiamLoss,
        "simclr": losses.SimCLRLoss,
        "barlow": losses.Barlow,
        "vicreg": losses.VicReg,
    }[algorithm]()


@keras.saving.register_keras_serializable(package="Similarity")
class ContrastiveModel(IndexMixin, keras.Model):
    """A backbone trained self-supervised on two views, with global-batch semantics.

    `fit` takes either pairs of views `(view1, view2)` or batches of images plus an
    `augmenter` that makes the two views. Each step runs the views through the
    backbone, the projector and (SimSiam) the predictor, and minimises the
    algorithm's loss. Under `tf.distribute` (`MirroredStrategy`,
    `MultiWorkerMirroredStrategy`) one step means exactly what it means on one
    device holding the global batch:

    * the loss is computed over the global batch (the losses gather embeddings
      across replicas), and each replica minimises its `1 / num_replicas` share
      of it (the Keras loss convention), so the optimizer's sum of replica
      gradients is the gradient of the global loss;
    * regularisation losses of the sub-models are also scaled by
      `1 / num_replicas`, so that summed over replicas they count once;
    * with `sync_bn`, every batch norm in the backbone, projector and predictor
      uses global-batch statistics.

    The backbone's representations can be indexed and searched as a
    `SimilarityModel`'s embeddings (`compile` or `create_index`, `index`,
    `lookup`, `calibrate`, `match`, ...: see `IndexMixin`); `save` writes the
    index beside the model file, and `load_index` reads it back.

    The model is built as soon as its sub-models are (Functional models, such
    as `create_contrastive_model` and the architectures make, are built when
    made), so `save` and `keras.callbacks.ModelCheckpoint` write its weights
    and optimizer state, and a loaded model resumes training where it
    stopped. Sub-models built only by their first call make the model built
    at the end of `fit`.

    Metrics: `loss`, and the collapse monitors `proj_std` and `pred_std` (SimSiam):
    the per-dimension standard deviation of the L2-normalised outputs over the
    global batch (as one device holding it would compute it), averaged over
    dimensions. It is about `1/sqrt(dim)` for a healthy representation and
    falls to 0 when it collapses.

    Args:
        backbone: Keras model mapping images to representations (what `predict`
            and `embed` return).
        projector: Keras model mapping representations to projections.
        predictor: Keras model mapping projections to predictions (SimSiam), or
            `None`. Defaults to `None`.
        algorithm: One of `"simsiam"`, `"simclr"`, `"barlow"`, `"vicreg"`; picks
            the default loss. Defaults to `"simsiam"`.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`: synchronise the batch
            norm of all three sub-models (converted copies are used; the models
            passed in are untouched). Defaults to `False`.
        augmenter: Callable `images -> (view1, view2)`, used when `fit` receives
            plain images. Defaults to `None` (the data must hold view pairs).
        concat_views: `True` runs both views through the networks as one batch
            (batch norm normalises over both views), `False` one call per view.
            `None` (default) does what the algorithm's paper did: `True` for
            SimCLR, `False` for the others.
        **kwargs: `keras.Model` keyword arguments (`name`, ...).

    Raises:
        ValueError: For an unknown `algorithm`, or SimSiam without a predictor.
        TypeError: If a sub-model is not a Keras model or `sync_bn` is invalid.

    Example:

    Training under a strategy, on a `tf.data.Dataset` of `(view1, view2)`
    batches (`view_pairs`), so the example is not a doctest:

    ```python
    import tensorflow as tf
    from tensorflow_similarity.architectures import ResNet18Sim
    from tensorflow_similarity.models import create_contrastive_model

    strategy = tf.distribute.MirroredStrategy()
    with strategy.scope():
        model = create_contrastive_model(ResNet18Sim((32, 32, 3)), "simsiam", sync_bn=True)
        model.compile(optimizer="sgd")
    model.fit(view_pairs, epochs=10)
    ```
    """

    def __init__(
        self,
        backbone: keras.Model,
        projector: keras.Model,
        predictor: keras.Model | None = None,
        algorithm: str = "simsiam",
        sync_bn: bool | SyncBatchNormPlugin = False,
        augmenter: Any = None,
        concat_views: bool | None = None,
        **kwargs: Any,
    ) -> None:
        algorithm = algorithm.lower() if isinstance(algorithm, str) else algorithm
        if algorithm not in ALGORITHMS:
            raise ValueError(
                f"Unknown algorithm {algorithm!r}. Use one of {', '.join(ALGORITHMS)}."
            )
        for name, sub_model in (("backbone", backbone), ("projector", projector)):
            if not isinstance(sub_model, keras.Model):
                raise TypeError(f"{name} must be a keras.Model, got {type(sub_model).__name__}.")
        if predictor is not None and not isinstance(predictor, keras.Model):
            raise TypeError(
                f"predictor must be a keras.Model or None, got {type(predictor).__name__}."
            )
        if algorithm == "simsiam" and predictor is None:
            raise ValueError(
                "SimSiam needs a predictor model (it is what breaks the symmetry between "
                "the views). Pass predictor=..., or build all heads with "
                "create_contrastive_model(backbone, 'simsiam')."
            )
        if augmenter is not None and not callable(augmenter):
            raise TypeError("augmenter must be callable: images -> (view1, view2).")
        plugin = resolve_sync_bn(sync_bn)
        super().__init__(**kwargs)
        if plugin is not None:
            # A sub-model built synchronised (a native builder with sync_bn) comes back as is.
            backbone, projector = plugin.apply(backbone), plugin.apply(projector)
            predictor = plugin.apply(predictor) if predictor is not None else None
        self.backbone = backbone
        self.projector = projector
        self.predictor = predictor
        self.algorithm = algorithm
        self.sync_bn = plugin
        self.augmenter = augmenter
        self.concat_views = concat_views
        self._views_concatenated = (
            _PAPER_CONCAT_VIEWS[algorithm] if concat_views is None else bool(concat_views)
        )
        self._default_loss = _default_loss(algorithm)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.proj_std_tracker = keras.metrics.Mean(name="proj_std")
        self.pred_std_tracker = keras.metrics.Mean(name="pred_std") if predictor else None
        self._index_settings: dict[str, Any] | None = None
        # Last: building locks the model's state (Keras adds no layer or variable after).
        self._build_when_ready()

    def _build_when_ready(self) -> None:
        """Marks the model built once its sub-models are, so that saving keeps its state.

        The training step calls the sub-models, never `call`, so Keras itself
        would leave the model unbuilt: saved without a build config, it would
        load with no optimizer variables and drop the optimizer's state.
        """
        sub_models = [self.backbone, self.projector, self.predictor]
        if self.built or not all(m.built for m in sub_models if m is not None):
            return
        inputs = getattr(self.backbone, "inputs", None)
        self.build(tuple(inputs[0].shape) if inputs else None)

    @property
    def metrics(self) -> list[keras.metrics.Metric]:
        trackers = [self.loss_tracker, self.proj_std_tracker]
        if self.pred_std_tracker is not None:
            trackers.append(self.pred_std_tracker)
        return trackers

    def call(self, inputs, training=None, mask=None):
        """Returns the backbone's representations of `inputs` (see `predict`)."""
        del mask
        if self._is_stacked_pair(inputs):
            inputs = inputs[:, 0]
        return self.backbone(inputs, training=training)

    def compile(
        self,
        optimizer: Any = "rmsprop",
        loss: Any = None,
        metrics: Any = None,
        loss_weights: Any = None,
        weighted_metrics: Any = None,
        run_eagerly: bool = False,
        steps_per_execution: int = 1,
        distance: Distance | str = "cosine",
        kv_store: Store | str = "memory",
        search: Search | str = "linear",
        evaluator: Evaluator | str = "memory",
        stat_buffer_size: int = 1000,
        **kwargs: Any,
    ) -> None:
        """`keras.Model.compile`, with `loss` the loss of the two views' outputs, and the index.

        The loss is called by this model's own training step, as
        `loss(target, prediction)` on the outputs of the two views (see
        `train_step`), never by Keras' compiled-loss machinery, which calls a
        compiled loss with `y_true=None` while it builds it and has no labels
        to give it here. As in 0.17, `compile` also creates the (empty) index
        of the backbone's representations, with `create_index`'s arguments,
        when the backbone outputs `[batch, dim]` vectors.

        Args:
            optimizer: As for `keras.Model.compile`.
            loss: A loss of two views, such as `SimCLRLoss(temperature=0.5)`,
                or `None` (default) for the algorithm's.
            metrics: As for `keras.Model.compile`.
            loss_weights: As for `keras.Model.compile`.
            weighted_metrics: As for `keras.Model.compile`.
            run_eagerly: As for `keras.Model.compile`. Defaults to `False`.
            steps_per_execution: As for `keras.Model.compile`. Defaults to 1.
            distance: The index's `Distance` or its name. Defaults to
                `"cosine"`.
            kv_store: `"memory"` or a `Store`. Defaults to `"memory"`.
            search: `"linear"` or a `Search`. Defaults to `"linear"`.
            evaluator: `"memory"` or an `Evaluator`. Defaults to `"memory"`.
            stat_buffer_size: Lookup timings kept for `index_summary`.
                Defaults to 1000.
            **kwargs: Other `keras.Model.compile` arguments.

        Raises:
            ValueError: For a bad index argument (checked before Keras
                compiles), or what `keras.Model.compile` raises.
        """
        outputs = getattr(self.backbone, "outputs", None)
        if outputs and len(outputs[0].shape) == 2:
            self.create_index(distance, search, kv_store, evaluator, stat_buffer_size)
        else:
            # A feature-map backbone still trains; its index API says why it cannot index.
            self._ix = None
        super().compile(
            optimizer=optimizer,
            metrics=metrics,
            loss_weights=loss_weights,
            weighted_metrics=weighted_metrics,
            run_eagerly=run_eagerly,
            steps_per_execution=steps_per_execution,
            **kwargs,
        )
        self.loss = loss
        self._index_settings = {
            "distance": self._ix.distance if self._ix is not None else distance,
            "search": search,
            "kv_store": kv_store,
            "evaluator": evaluator if isinstance(evaluator, str) else "memory",
            "stat_buffer_size": stat_buffer_size,
        }

    def create_index(
        self,
        distance: Distance | str = "cosine",
        search: Search | str = "linear",
        kv_store: Store | str = "memory",
        evaluator: Evaluator | str = "memory",
        stat_buffer_size: int = 1000,
        *,
        embedding_output: int | None = None,
    ) -> None:
        """Creates the (empty) index of the backbone's representations, in 0.17's order.

        Args:
            distance: A `Distance` or its name. Defaults to `"cosine"`.
            search: `"linear"` or a `Search` instance. Defaults to `"linear"`.
            kv_store: `"memory"` or a `Store` instance. Defaults to `"memory"`.
            evaluator: `"memory"` or an `Evaluator`. Defaults to `"memory"`.
            stat_buffer_size: Lookup timings kept for `index_summary`.
                Defaults to 1000.
            embedding_output: Must be `None`: the backbone has one output.

        Raises:
            ValueError: For an unknown component, or a backbone whose output
                is not `[batch, dim]`.
        """
        super().create_index(
            distance=distance,
            search=search,
            kv_store=kv_store,
            evaluator=evaluator,
            embedding_output=embedding_output,
            stat_buffer_size=stat_buffer_size,
        )

    def get_compile_config(self) -> dict[str, Any]:
        """Keras' compile config with this model's loss (see `compile`) and index settings."""
        config = super().get_compile_config()
        if config:
            config["loss"] = keras.saving.serialize_keras_object(self.loss)
            if self._index_settings is not None:
                config["index"] = {
                    key: value
                    if isinstance(value, (str, int, type(None)))
                    else keras.saving.serialize_keras_object(value)
                    for key, value in self._index_settings.items()
                }
        return config

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Compiles the model from `get_compile_config()`'s output, as loading does."""
        config = keras.saving.deserialize_keras_object(config)
        index_settings = config.pop("index", None) or {}
        self.compile(**config, **index_settings)
        if self.built:
            # As Keras does: the optimizer's variables exist before the weights are loaded.
            self.optimizer.build(self.trainable_variables)

    def fit(self, x=None, *args, callbacks=None, stop_on_non_finite: bool = True, **kwargs):
        """`keras.Model.fit`, with datasets of view pairs packed into one tensor.

        A `tf.data.Dataset` of `(view1, view2)` pairs is mapped to one
        `[batch, 2, ...]` tensor per batch: Keras 3's `fit` under
        `MultiWorkerMirroredStrategy` cannot take a tuple of distributed
        values (keras-team/keras#20585), while a single tensor works under
        every strategy. The views are unpacked again in `train_step`.

        A step whose views or weights are not finite reports a NaN loss, and
        with `stop_on_non_finite=True` (the default) a `StopOnNonFinite`
        placed before `callbacks` raises `TrainingDiverged` at the first
        non-finite loss or weight, naming the epoch and step; `False` trains
        on as Keras does. See `SimilarityModel.fit`.
        """
        args, keywords = fit_arguments(args, 4, callbacks, stop_on_non_finite)
        self._build_when_ready()
        history = super().fit(_pack_pairs(x), *args, **keywords, **kwargs)
        self._build_when_ready()
        return history

    def evaluate(self, x=None, *args, **kwargs):
        """`keras.Model.evaluate`, with view pairs packed as in `fit`."""
        return super().evaluate(_pack_pairs(x), *args, **kwargs)

    def predict(
        self,
        x: Any,
        batch_size: int | None = None,
        verbose: int | str = 0,
        steps: int | None = None,
        callbacks: Any = None,
        max_queue_size: int = 10,
        workers: int = 1,
        use_multiprocessing: bool = False,
    ) -> Any:
        """The backbone's representations of `x` (`keras.Model.predict`), silent by default.

        Returns what `call` returns, the backbone's output (0.17 returned the
        L2-normalised projector output: `embed(x, output="projector")`).

        Args:
            x: Images (array, tensor or dataset).
            batch_size: As for `keras.Model.predict`.
            verbose: As for `keras.Model.predict`. Defaults to 0, as in 0.17.
            steps: As for `keras.Model.predict`.
            callbacks: As for `keras.Model.predict`.
            max_queue_size: Accepted for 0.17's signature; Keras 3 takes the
                loading settings on a `keras.utils.PyDataset`.
            workers: Likewise.
            use_multiprocessing: Likewise.
        """
        del max_queue_size, workers, use_multiprocessing
        return super().predict(
            x, batch_size=batch_size, verbose=verbose, steps=steps, callbacks=callbacks
        )

    def embed(self, images, output: str = "backbone", batch_size: int = 256):
        """Returns NumPy embeddings of `images`.

        Args:
            images: Array or dataset of images.
            output: `"backbone"` (representations) or `"projector"` (projections).
            batch_size: Batch size for array inputs. Defaults to 256.

        Returns:
            A NumPy array of embeddings.

        Raises:
            ValueError: For an unknown `output`.
        """
        if output == "backbone":
            return self.backbone.predict(images, batch_size=batch_size, verbose=0)
        if output == "projector":
            encoder = keras.Sequential([self.backbone, self.projector])
            return encoder.predict(images, batch_size=batch_size, verbose=0)
        raise ValueError(f"output must be 'backbone' or 'projector', got {output!r}.")

    def _index_embeddings(self, x):
        return self.embed(x, batch_size=self.index_batch_size)

    def _index_embedding_size(self, embedding_output: int | None) -> int:
        if embedding_output is not None:
            raise ValueError(
                "A ContrastiveModel indexes its backbone's single output; pass "
                "embedding_output=None."
            )
        shape = self.backbone.outputs[0].shape
        if len(shape) != 2 or shape[-1] is None:
            raise ValueError(
                f"The backbone's output has shape {shape}; an index needs [batch, dim] "
                "representations. Use a backbone with pooling."
            )
        return int(shape[-1])

    def _index_input_shape(self) -> tuple[int | None, ...] | None:
        return tuple(self.backbone.inputs[0].shape[1:]) if self.backbone.inputs else None

    def train_step(self, data):
        view1, view2 = self._views(data)
        replicas = tf.cast(_num_replicas(), tf.float32)
        with tf.GradientTape() as tape:
            # This replica's share of the global loss: Keras losses already divide by
            # the number of replicas, so the optimizer's sum over replicas is the whole.
            share, z1, p1 = self._forward(view1, view2, training=True)
            share = nan_unless_finite(share, (view1, view2), self.weights)
            total = share
            if self.losses:
                regularization = tf.add_n([tf.cast(x, tf.float32) for x in self.losses])
                total = total + regularization / replicas
            if self.optimizer is not None:
                total = self.optimizer.scale_loss(total)
        variables = self.trainable_variables
        gradients = tape.gradient(total, variables)
        self.optimizer.apply_gradients(zip(gradients, variables, strict=True))
        return self._update_metrics(share * replicas, z1, p1)

    def test_step(self, data):
        view1, view2 = self._views(data)
        share, z1, p1 = self._forward(view1, view2, training=False)
        return self._update_metrics(share * tf.cast(_num_replicas(), tf.float32), z1, p1)

    def _is_stacked_pair(self, data) -> bool:
        image_rank = len(self.backbone.inputs[0].shape) if self.backbone.inputs else None
        return (
            image_rank is not None
            and hasattr(data, "shape")
            and len(data.shape) == image_rank + 1
            and data.shape[1] == 2
        )

    def _views(self, data):
        while isinstance(data, (tuple, list)) and len(data) == 1:
            data = data[0]
        if self._is_stacked_pair(data):
            return data[:, 0], data[:, 1]
        if isinstance(data, (tuple, list)):
            if len(data) != 2:
                raise ValueError(
                    "ContrastiveModel expects batches of (view1, view2) pairs or of images "
                    f"with an augmenter; got a tuple of {len(data)} elements."
                )
            return data[0], data[1]
        if self.augmenter is None:
            raise ValueError(
                "ContrastiveModel received plain images but has no augmenter. Pass "
                "augmenter=... (e.g. tensorflow_similarity.augmenters) or feed "
                "(view1, view2) pairs."
            )
        return self.augmenter(data)

    def _encode(self, view1, view2, model, training):
        if self._views_concatenated:
            both = model(tf.concat([view1, view2], axis=0), training=training)
            return tf.split(both, 2, axis=0)
        return model(view1, training=training), model(view2, training=training)

    def _forward(self, view1, view2, training):
        h1, h2 = self._encode(view1, view2, self.backbone, training)
        z1, z2 = self._encode(h1, h2, self.projector, training)
        loss_fn = self.loss if self.loss is not None else self._default_loss
        if self.predictor is not None:
            p1, p2 = self._encode(z1, z2, self.predictor, training)
            # SimSiam's symmetric loss: each prediction regresses the other view's projection,
            # called as Keras losses are, loss(target, prediction).
            loss = 0.5 * (loss_fn(z2, p1) + loss_fn(z1, p2))
        else:
            p1 = None
            loss = loss_fn(z1, z2)
        return tf.cast(loss, tf.float32), z1, p1

    def _update_metrics(self, loss, z1, p1):
        self.loss_tracker.update_state(loss)
        self.proj_std_tracker.update_state(_normalised_std(z1))
        if p1 is not None and self.pred_std_tracker is not None:
            self.pred_std_tracker.update_state(_normalised_std(p1))
        results = {m.name: m.result() for m in self.metrics}
        if _multi_worker():
            # Keras 3 reduces logs across workers with `reduce(MEAN, axis=0)`, which
            # fails on scalars (keras-team/keras#20585): give each a batch axis.
            results = {name: tf.reshape(value, [1]) for name, value in results.items()}
        return results

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        serialize = keras.saving.serialize_keras_object
        config.update(
            {
                "backbone": serialize(self.backbone),
                "projector": serialize(self.projector),
                "predictor": serialize(self.predictor) if self.predictor else None,
                "algorithm": self.algorithm,
                "sync_bn": serialize(self.sync_bn) if self.sync_bn else False,
                "augmenter": self._serialized_augmenter(),
                "concat_views": self.concat_views,
            }
        )
        return config

    def _serialized_augmenter(self) -> dict[str, Any] | None:
        if self.augmenter is None:
            return None
        if callable(getattr(self.augmenter, "get_config", None)):
            return keras.saving.serialize_keras_object(self.augmenter)
        warnings.warn(
            f"ContrastiveModel {self.name!r}: the augmenter {self.augmenter!r} has no "
            "get_config(), so the saved model does not keep it. After loading, set "
            "model.augmenter again, or use a serialisable augmenter such as "
            "tensorflow_similarity.augmenters.ViewAugmenter.",
            UserWarning,
            stacklevel=3,
        )
        return None

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ContrastiveModel:
        config = dict(config)
        deserialize = keras.saving.deserialize_keras_object
        for key in ("backbone", "projector", "predictor", "augmenter", "sync_bn"):
            if isinstance(config.get(key), dict):
                config[key] = deserialize(config[key])
        return cls(**config)


def _pack_pairs(x):
    if not isinstance(x, tf.data.Dataset):
        return x
    spec = x.element_spec
    if (
        isinstance(spec, tuple)
        and len(spec) == 2
        and all(isinstance(s, tf.TensorSpec) for s in spec)
        and spec[0].shape.rank == spec[1].shape.rank
    ):
        return x.map(lambda a, b: tf.stack([a, b], axis=1))
    return x


def _multi_worker() -> bool:
    strategy = tf.distribute.get_strategy()
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    return strategy.cluster_resolver.cluster_spec().num_tasks("worker") > 1


def _num_replicas() -> int:
    ctx = tf.distribute.get_replica_context()
    return ctx.num_replicas_in_sync if ctx is not None else 1


def _normalised_std(x: tf.Tensor) -> tf.Tensor:
    """The collapse monitor of `x`'s rows over the global batch (one all-reduce).

    The mean over dimensions of each dimension's (population) standard
    deviation of the L2-normalised rows, from the global count, sums and sums
    of squares, so that it is the single-device figure of the global batch.
    """
    x = l2_normalize(tf.cast(tf.stop_gradient(x), tf.float32), axis=-1)
    count = tf.cast(tf.shape(x)[:1], tf.float32)
    sums = global_sum(tf.concat([count, tf.reduce_sum(x, 0), tf.reduce_sum(tf.square(x), 0)], 0))
    count, first, second = sums[0], sums[1:][: tf.shape(x)[1]], sums[1:][tf.shape(x)[1] :]
    mean = first / tf.maximum(count, 1.0)
    variance = tf.maximum(second / tf.maximum(count, 1.0) - tf.square(mean), 0.0)
    return tf.reduce_mean(tf.sqrt(variance))


def create_contrastive_model(
    backbone: keras.Model,
    algorithm: str = "simsiam",
    projector_hidden_dim: int | None = None,
    projector_output_dim: int | None = None,
    projector_hidden_layers: int | None = None,
    predictor_hidden_dim: int | None = None,
    sync_bn: bool | SyncBatchNormPlugin = False,
    augmenter: Any = None,
    concat_views: bool | None = None,
    name: str = "contrastive_model",
    *,
    projector: keras.Model | None = None,
    predictor: keras.Model | None = None,
    projector_width: str = "scaled",
) -> ContrastiveModel:
    """Builds a `ContrastiveModel` with the paper's projector (and predictor) for `algorithm`.

    The heads are the paper's, with widths in proportion to the backbone's
    (`projector_width="scaled"`, see `projector_widths` for the parameter
    counts) or the paper's own (`"paper"`); the chosen widths and parameter
    count are logged at INFO level. Heads built elsewhere are passed as
    `projector=` (and `predictor=`), as in tensorflow-similarity 0.17. With
    `sync_bn`, the batch norms of the backbone, the projector and the
    predictor are all synchronised.

    Args:
        backbone: Keras model with a 2-D output `[batch, features]` (use a
            builder's `include_top=False` with a pooling).
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"` or `"vicreg"`.
        projector_hidden_dim: Projector hidden width; `None`: see
            `projector_width`.
        projector_output_dim: Projector output width; `None`: see
            `projector_width`.
        projector_hidden_layers: Projector hidden layers; `None` keeps 2.
        predictor_hidden_dim: SimSiam predictor bottleneck; `None` uses a quarter
            of the projector output width.
        sync_bn: `False`, `True` or a `SyncBatchNormPlugin`. Defaults to `False`.
        augmenter: Optional callable `images -> (view1, view2)`.
        concat_views: See `ContrastiveModel`. Defaults to `None`.
        name: Model name.
        projector: A projector model to use instead of building one
            (keyword-only, as the two below); then the `projector_*`
            arguments must be left `None`.
        predictor: A predictor model (SimSiam only); `None` builds one on the
            projector's output width.
        projector_width: `"scaled"` (default) or `"paper"`; see
            `projector_widths`.

    Returns:
        An uncompiled `ContrastiveModel`.

    Raises:
        ValueError: For an unknown algorithm or `projector_width`, a backbone
            whose output is not 2-D, `projector` together with
            `projector_*` widths, or a `predictor` for an algorithm other
            than SimSiam.
        TypeError: If a head is not a Keras model.

    Example:

    >>> import keras
    >>> from tensorflow_similarity.models import create_contrastive_model
    >>> images = keras.Input((8, 8, 3))
    >>> x = keras.layers.BatchNormalization()(keras.layers.Conv2D(16, 3)(images))
    >>> features = keras.layers.GlobalAveragePooling2D()(x)
    >>> model = create_contrastive_model(keras.Model(images, features), "barlow",
    ...                                  projector_output_dim=64, sync_bn=True)
    >>> model.projector.output.shape
    (None, 64)
    """
    algorithm = _check_algorithm(algorithm)
    if not isinstance(backbone, keras.Model):
        raise TypeError(f"backbone must be a keras.Model, got {type(backbone).__name__}.")
    output_shape = backbone.output.shape if hasattr(backbone, "output") else None
    if output_shape is None or len(output_shape) != 2 or output_shape[-1] is None:
        raise ValueError(
            "The backbone must output [batch, features]; got output shape "
            f"{output_shape}. Build it with a pooling (e.g. include_top=False, pooling='avg')."
        )
    widths = {
        "projector_hidden_dim": projector_hidden_dim,
        "projector_output_dim": projector_output_dim,
        "projector_hidden_layers": projector_hidden_layers,
    }
    given = [key for key, value in widths.items() if value is not None]
    if projector is not None and given:
        raise ValueError(
            f"create_contrastive_model: {', '.join(given)} size a projector to build, but a "
            "projector model was passed. Give either projector=... or the widths."
        )
    if predictor is not None and algorithm != "simsiam":
        raise ValueError(
            f"create_contrastive_model: only SimSiam has a predictor; algorithm={algorithm!r} "
            "would not use the one passed. Drop predictor=..., or use algorithm='simsiam'."
        )
    for head_name, head in (("projector", projector), ("predictor", predictor)):
        if head is not None and not isinstance(head, keras.Model):
            raise TypeError(f"{head_name} must be a keras.Model, got {type(head).__name__}.")
    resolve_sync_bn(sync_bn)  # A bad value fails here, before anything is built.
    if projector is None:
        projector = build_projector(
            output_shape[-1],
            algorithm,
            hidden_layers=projector_hidden_layers,
            hidden_dim=projector_hidden_dim,
            output_dim=projector_output_dim,
            sync_bn=sync_bn,
            projector_width=projector_width,
        )
    if algorithm == "simsiam" and predictor is None:
        out_dim = projector.output.shape[-1]
        predictor = build_predictor(
            out_dim,
            hidden_dim=predictor_hidden_dim or max(out_dim // 4, 1),
            sync_bn=sync_bn,
        )
    _logger.info(
        "create_contrastive_model(%s): projector %s (%d parameters)%s",
        algorithm,
        "-".join(str(layer.units) for layer in projector.layers if hasattr(layer, "units")),
        projector.count_params(),
        f", predictor {predictor.count_params()} parameters" if predictor is not None else "",
    )
    return ContrastiveModel(
        backbone,
        projector,
        predictor,
        algorithm=algorithm,
        sync_bn=sync_bn,
        augmenter=augmenter,
        concat_views=concat_views,
        name=name,
    )
