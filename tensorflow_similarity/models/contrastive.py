"""Self-supervised training of a backbone with two augmented views of each image."""

from __future__ import annotations

from typing import Any

import keras

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distances import Distance
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.evaluators import Evaluator
from tensorflow_similarity.models.accumulation import group_micro_batches
from tensorflow_similarity.models.backbone_index import BackboneIndexMixin
from tensorflow_similarity.models.cached_contrastive_step import check_contrastive_chunk_size
from tensorflow_similarity.models.contrastive_arguments import (
    check_contrastive_arguments,
    check_shuffle_replicas,
    resolve_batch_norm,
    serialize_augmenter,
)
from tensorflow_similarity.models.contrastive_step import ContrastiveStepMixin
from tensorflow_similarity.models.non_finite import fit_arguments
from tensorflow_similarity.models.teacher import MomentumTeacherMixin
from tensorflow_similarity.models.view_pairs import is_stacked_pair, pack_view_pairs
from tensorflow_similarity.search import Search
from tensorflow_similarity.stores import Store

__all__ = ["ContrastiveModel"]


@keras.saving.register_keras_serializable(package="Similarity")
class ContrastiveModel(ContrastiveStepMixin, MomentumTeacherMixin, BackboneIndexMixin, keras.Model):
    """A backbone trained self-supervised on two views, with global-batch semantics.

    `fit` takes either pairs of views `(view1, view2)` or batches of images plus an
    `augmenter` that makes the two views. Each step runs the algorithm's
    forward pass (see `models.algorithms`, one module per method): the views
    through the backbone, the projector and (SimSiam) the predictor, and the
    algorithm's loss, which the step minimises. Under `tf.distribute` (`MirroredStrategy`,
    `MultiWorkerMirroredStrategy`) one step means exactly what it means on one
    device holding the global batch:

    * the loss is computed over the global batch (the losses gather embeddings
      across replicas), and each replica minimises its `1 / num_replicas` share
      of it (the Keras loss convention), so the optimizer's sum of replica
      gradients is the gradient of the global loss;
    * regularisation losses of the sub-models are also scaled by
      `1 / num_replicas`, so that summed over replicas they count once;
    * with `bn="sync"` (`sync_bn`), every batch norm in the backbone, projector
      and predictor uses global-batch statistics.

    Batch norm has three modes (`bn`). `"per_replica"` (the default)
    normalises each replica's share of the batch on its own, which lets a
    contrastive model recognise the samples that share its replica by their
    statistics (a leak of the batch's make-up into the embeddings); `"sync"`
    normalises with the global batch's statistics, at one collective per
    batch-norm layer; `"shuffle"` (MoCo's shuffle batch norm, for a method
    with a key encoder: BYOL, MoCo v3) keeps per-replica statistics but runs
    the key encoder on the global batch permuted across the replicas and
    restores its outputs' order after, so that a query and its key are
    normalised over different samples, at two collectives per call of the key
    encoder (see `models.shuffle_batch_norm`). Shuffling changes nothing on
    one replica, where `fit` refuses it.

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

    A method with a momentum teacher (BYOL, MoCo v3, DINO) keeps
    `teacher_backbone` and `teacher_projector`, which follow the student along
    a cosine momentum schedule (see `models.teacher.MomentumTeacherMixin`). A
    method's own variables (DINO's centre) are its `method_state`, saved with
    the model; the method sees the model through a `MethodContext` only.

    With `accumulation_steps=N`, each optimizer step takes `N` consecutive
    batches of the dataset: their gradients, each of its batch's loss divided
    by `N`, are summed and applied once, as Keras'
    `gradient_accumulation_steps` does, but inside one training step and so
    under every strategy. The teacher and DINO's centre move once per applied
    step; batch norm moving statistics move once per batch. An epoch of `fit`
    then counts optimizer steps (`steps_per_epoch` too). For a loss that
    compares samples across the batch (SimCLR, MoCo v3, Barlow Twins,
    VICReg, DINO's centre) `N` accumulated batches are not one batch `N`
    times larger: each batch's samples meet only each other.

    With `chunk_size=C`, each replica's batch (each micro-batch) runs
    through the student in chunks of `C` samples, whose activations are never
    held together: the chunks' outputs are computed without a tape, the loss
    and its gradient with respect to the outputs are taken over the whole
    batch (gathered over the replicas as in one pass), then each chunk runs
    again under a tape with its rows of that gradient
    (`models.cached_embeddings`). A teacher's outputs are computed chunk by
    chunk once, without a tape. For networks without batch norm the loss,
    every gradient and the optimizer's step equal one pass over the batch.
    Batch norm normalises each chunk with the chunk's statistics (with
    `sync_bn`, the replicas' chunks together) and updates its moving
    statistics once per chunk, as `batch / C` smaller batches would.
    Random layers with seed generators (dropout) draw the same values in
    both passes. `C` must divide each replica's batch (the global batch over
    the replicas, for each of the `accumulation_steps` batches); the
    method's forward pass must split into per-sample outputs and a loss
    (DINO's does not: refused), and the networks must add no activity losses.

    Unlike Keras' option, a step cannot span the end of the dataset: from a
    dataset of `B` batches an epoch takes `B // N` steps, and its last `B % N`
    batches never train (a `UserWarning` names them; a repeated dataset with
    `steps_per_epoch` loses none). `fit` refuses a dataset of fewer than `N`
    batches, which would take no step, and warns that one of unknown length
    cannot be checked. The `N` batches of a step are stacked into one tensor,
    so they must have one size: batches of `batch(b)` without
    `drop_remainder` are taken as long as they do, and a step whose batches
    differ stops `fit` with an error.

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
        algorithm: `"simsiam"`, `"simclr"`, `"barlow"`, `"vicreg"`, `"byol"`,
            `"mocov3"`, `"dino"`, `"mocov2"`, `"swav"` or another name
            registered with `models.algorithms.register_algorithm`; picks the
            forward pass and the default loss. Defaults to `"simsiam"`.
        sync_bn: `None`, `False`, `True` or a `SyncBatchNormPlugin`: synchronise
            the batch norm of all three sub-models (converted copies are used;
            the models passed in are untouched). `True` or a plugin is
            `bn="sync"`, `False` is `bn="per_replica"` (or `"shuffle"`).
            Defaults to `None`: as `bn` says, else `False`.
        augmenter: Callable `images -> (view1, view2)`, used when `fit` receives
            plain images. Defaults to `None` (the data must hold view pairs).
        concat_views: `True` runs both views through the networks as one batch
            (batch norm normalises over both views), `False` one call per view.
            `None` (default) does what the algorithm's paper did (its
            `concat_views`): `True` for SimCLR, `False` for the others.
        accumulation_steps: Batches per optimizer step (keyword-only, as the
            arguments below). Defaults to 1.
        chunk_size: `None` (default), or the samples of each replica's
            batch that run through the networks at once: cached embeddings
            (GradCache), exact for any batch size. See below.
        momentum: The teacher's first-step momentum, in [0, 1]; `None`
            (default) for the method's (BYOL 0.996, MoCo v3 0.99, DINO
            0.996). Only for a method with a teacher.
        total_steps: The optimizer steps of the whole run, for the momentum
            schedule; `None` (default) takes them from `fit`.
        algorithm_options: The method's own options (DINO: see
            `models.algorithms.DINO`); `None` keeps its defaults.
        bn: The batch-norm mode: `"per_replica"`, `"sync"` or `"shuffle"`
            (see above). Defaults to `None`: as `sync_bn` says, else
            `"per_replica"`.
        shuffle_seed: With `bn="shuffle"`, the seed of the key encoder's
            permutations, each drawn from it and the optimizer step
            (`models.shuffle_batch_norm.batch_shuffle_permutation`), so a run
            and its resumption permute alike. Defaults to 0.
        **kwargs: `keras.Model` keyword arguments (`name`, ...).

    Raises:
        ValueError: For an unknown `algorithm`, or heads it cannot train with
            (SimSiam without a predictor), a teacher-based method whose
            backbone has no trainable weights, a `momentum` outside [0, 1] or
            for a method without a teacher, `accumulation_steps` or
            `total_steps` not a positive int, a `chunk_size` not a positive
            int or for a method whose forward pass does not split (DINO), an
            unknown algorithm option, an
            unknown `bn`, a `bn` that contradicts `sync_bn`, or
            `bn="shuffle"` for a method without a key encoder.
        TypeError: If a sub-model is not a Keras model, `sync_bn` is invalid
            or `shuffle_seed` is not an int.

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
        sync_bn: bool | SyncBatchNormPlugin | None = None,
        augmenter: Any = None,
        concat_views: bool | None = None,
        *,
        accumulation_steps: int = 1,
        chunk_size: int | None = None,
        momentum: float | None = None,
        total_steps: int | None = None,
        algorithm_options: dict[str, Any] | None = None,
        bn: str | None = None,
        shuffle_seed: int = 0,
        **kwargs: Any,
    ) -> None:
        method, accumulation_steps, momentum, total_steps, options = check_contrastive_arguments(
            algorithm,
            backbone,
            projector,
            predictor,
            augmenter,
            accumulation_steps,
            momentum,
            total_steps,
            algorithm_options,
        )
        bn, plugin = resolve_batch_norm(bn, sync_bn, method)
        shuffle_seed = check_int("shuffle_seed", shuffle_seed, minimum=0)
        chunk_size = check_contrastive_chunk_size(chunk_size, method)
        super().__init__(**kwargs)
        if plugin is not None:
            # A sub-model built synchronised (a native builder with sync_bn) comes back as is.
            backbone, projector = plugin.apply(backbone), plugin.apply(projector)
            predictor = plugin.apply(predictor) if predictor is not None else None
        self.backbone = backbone
        self.projector = projector
        self.predictor = predictor
        self.algorithm = method.name
        self._method = method
        self.sync_bn = plugin
        self.bn = bn
        self.shuffle_seed = shuffle_seed
        self.augmenter = augmenter
        self.concat_views = concat_views
        self._views_concatenated = (
            method.concat_views if concat_views is None else bool(concat_views)
        )
        self.accumulation_steps = accumulation_steps
        self.chunk_size = chunk_size
        self.momentum = momentum
        self.total_steps = total_steps
        self.algorithm_options = options
        self.teacher_backbone = None
        self.teacher_projector = None
        if method.has_teacher:
            self._create_teacher()
        self._method_state = {}
        method.create_state(self._method_context(create=True))
        self._default_loss = method.default_loss()
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.proj_std_tracker = keras.metrics.Mean(name="proj_std")
        self.pred_std_tracker = keras.metrics.Mean(name="pred_std") if predictor else None
        self.monitor_trackers = [keras.metrics.Mean(name=n) for n in method.monitor_names()]
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
    def method_state(self) -> dict[str, keras.Variable]:
        """The algorithm's own variables by name (DINO's `dino_center`), saved with the model.

        Each also reads as an attribute of the model (`model.dino_center`).
        """
        return dict(self._method_state)

    def __getattr__(self, name: str) -> Any:
        # Only reached when no attribute has the name: the method's state reads as one.
        state = self.__dict__.get("_method_state") or {}
        if name in state:
            return state[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def call(self, inputs, training=None, mask=None):
        """Returns the backbone's representations of `inputs` (see `predict`)."""
        del mask
        if is_stacked_pair(inputs, self._image_rank()):
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
        can_index = bool(outputs) and len(outputs[0].shape) == 2
        self._compile_index(can_index, distance, search, kv_store, evaluator, stat_buffer_size)
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

    def get_compile_config(self) -> dict[str, Any] | None:
        """The compile config of `IndexMixin`, with this model's loss (see `compile`)."""
        config = super().get_compile_config()
        if config:
            config["loss"] = keras.saving.serialize_keras_object(self.loss)
        return config

    def fit(self, x=None, *args, callbacks=None, stop_on_non_finite: bool = True, **kwargs):
        """`keras.Model.fit`, with datasets of view pairs packed into one tensor.

        A `tf.data.Dataset` of `(view1, view2)` pairs is mapped to one
        `[batch, 2, ...]` tensor per batch: Keras 3's `fit` under
        `MultiWorkerMirroredStrategy` cannot take a tuple of distributed
        values (keras-team/keras#20585), while a single tensor works under
        every strategy. The views are unpacked again in `train_step`.

        With `accumulation_steps=N`, a `tf.data.Dataset`'s `B` batches are
        grouped `N` by `N` (see the class docstring): the last `B % N` of an
        epoch never train and are named in a `UserWarning`, and `B < N`
        raises a `ValueError` before any work.

        A step whose views or weights are not finite reports a NaN loss, and
        with `stop_on_non_finite=True` (the default) a `StopOnNonFinite`
        placed before `callbacks` raises `TrainingDiverged` at the first
        non-finite loss or weight, naming the epoch and step; `False` trains
        on as Keras does. See `SimilarityModel.fit`.

        With `bn="shuffle"`, `fit` on one replica raises a `ValueError`
        before any work: the shuffle would change nothing there.
        """
        args, keywords = fit_arguments(args, 4, callbacks, stop_on_non_finite)
        if self.bn == "shuffle":
            check_shuffle_replicas(self.distribute_strategy.num_replicas_in_sync, self.name)
        self._build_when_ready()
        x = pack_view_pairs(x, self._image_rank())
        if self.accumulation_steps > 1:
            x = group_micro_batches(x, self.accumulation_steps, _steps_per_epoch(args, kwargs))
        if self.teacher_backbone is not None:
            self._set_schedule(x, args, kwargs)
        history = super().fit(x, *args, **keywords, **kwargs)
        self._build_when_ready()
        return history

    def evaluate(self, x=None, *args, **kwargs):
        """`keras.Model.evaluate`, with view pairs packed as in `fit`."""
        return super().evaluate(pack_view_pairs(x, self._image_rank()), *args, **kwargs)

    def _image_rank(self) -> int | None:
        return len(self.backbone.inputs[0].shape) if self.backbone.inputs else None

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
                "augmenter": serialize_augmenter(self.augmenter, self.name),
                "concat_views": self.concat_views,
                "accumulation_steps": self.accumulation_steps,
                "chunk_size": self.chunk_size,
                "momentum": self.momentum,
                "total_steps": self.total_steps,
                "algorithm_options": self.algorithm_options,
                "bn": self.bn,
                "shuffle_seed": self.shuffle_seed,
            }
        )
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ContrastiveModel:
        config = dict(config)
        deserialize = keras.saving.deserialize_keras_object
        for key in ("backbone", "projector", "predictor", "augmenter", "sync_bn"):
            if isinstance(config.get(key), dict):
                config[key] = deserialize(config[key])
        return cls(**config)


def _steps_per_epoch(args: tuple, kwargs: dict) -> int | None:
    """`fit`'s `steps_per_epoch`, by keyword or at position 11 of the arguments after `x`."""
    return args[11] if len(args) > 11 else kwargs.get("steps_per_epoch")
