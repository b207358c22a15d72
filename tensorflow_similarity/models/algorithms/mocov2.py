"""MoCo v2: queries against momentum keys and a queue of earlier keys (Chen et al., 2020)."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity import losses
from tensorflow_similarity.collectives import gather_global_batch
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.losses.global_batch import computation_dtype
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm, Forward
from tensorflow_similarity.models.algorithms.context import MethodContext
from tensorflow_similarity.models.algorithms.queue import (
    check_queue_fits,
    check_queue_size,
    enqueue,
    keys_per_step,
)
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.mlp_heads import ProjectorSpec, check_positive

# The queue's first rows, before any key is enqueued: Gaussian, as MoCo's, and the same in
# every model built, so that runs on different numbers of replicas start alike.
_QUEUE_SEED = 0


@register_algorithm
class MoCoV2(ContrastiveAlgorithm):
    """MoCo v2: InfoNCE of the queries against their momentum keys and a queue of earlier keys.

    Heads: MoCo v2's projector, an MLP without batch norm (2048-ReLU-128 on
    ResNet-50), and no predictor; the key encoder (the momentum teacher)
    copies the backbone and projector, base momentum 0.999, moving along the
    package's cosine schedule to 1 (MoCo v2 kept 0.999 throughout; with a
    long run the two differ little). Forward: the queries are the student's
    projections of the first view, the keys the key encoder's of the second
    (L2-normalised, no gradient; through `MethodContext.encode_keys`, so
    that shuffle batch norm applies), and `MoCoV2Loss` (temperature 0.2)
    contrasts each query with its own key against the queue's keys,
    `loss(tf.concat([keys, queue], 0), queries)`.

    The queue is the method's state `queue`, `[queue_size, d]`, saved with
    the model as `contrastive_model/queue`: it starts as Gaussian rows and,
    after each optimizer step, drops its oldest rows and appends the step's
    keys (`models.algorithms.queue.enqueue`), gathered over the replicas in
    the order of the global batch, every micro-batch of an accumulated step
    in turn. `K` replicas therefore hold the queue one device holding the
    global batch holds, and resuming a saved model resumes its queue.

    Options (`algorithm_options`):

    - `queue_size` (65,536, the paper's): rows of the queue. It must be a
      multiple of the keys one optimizer step enqueues, the global batch
      times `accumulation_steps` (so at least one step's), as MoCo's queue
      must; a size that is not is refused with a `ValueError` when the
      training step is traced, before any training (when the batch's size
      is not known statically, with an `InvalidArgumentError` when the step
      runs, before its forward pass: no weight moves).
    """

    name = "mocov2"
    title = "MoCo v2"
    projector = ProjectorSpec(hidden_layers=1, hidden_dim=2048, output_dim=128, output_bn=None)
    concat_views = False
    has_key_encoder = True
    base_momentum = 0.999
    option_defaults = {"queue_size": 65536}
    statistic_rules = {"keys": "concat"}
    paper = "Chen, Fan, Girshick & He, 2020"
    prevents_collapse = "a queue of earlier images' momentum keys are negatives"
    across_replicas = (
        "keys gathered in global batch order fill one queue, the same on every replica"
    )

    def default_loss(self) -> keras.losses.Loss:
        return losses.MoCoV2Loss()

    def resolve_options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        resolved = super().resolve_options(options)
        check_queue_size(resolved["queue_size"], f"{self.display_name} algorithm_options")
        return resolved

    def projector_from_spec(
        self,
        input_dim: int,
        spec: ProjectorSpec,
        sync_bn: bool | SyncBatchNormPlugin,
        name: str,
        activation: Any,
    ) -> keras.Model:
        """MoCo v2's MLP head: (Dense, activation) x `hidden_layers`, then Dense; no batch norm."""
        del sync_bn  # The head has no batch norm to synchronise.
        check_positive(input_dim=input_dim, hidden_dim=spec.hidden_dim, output_dim=spec.output_dim)
        inputs = keras.Input((input_dim,), name=f"{name}_input")
        x = inputs
        for i in range(spec.hidden_layers):
            x = keras.layers.Dense(spec.hidden_dim, name=f"{name}_dense{i}")(x)
            x = keras.layers.Activation(activation, name=f"{name}_relu{i}")(x)
        x = keras.layers.Dense(spec.output_dim, name=f"{name}_dense_out")(x)
        return keras.Model(inputs, x, name=name)

    def create_state(self, context: MethodContext) -> None:
        width = context.projector.outputs[0].shape[-1]
        context.add_state(
            "queue",
            (context.options["queue_size"], width),
            initializer=keras.initializers.RandomNormal(seed=_QUEUE_SEED),
        )

    def forward(
        self, context: MethodContext, view1: Any, view2: Any, loss: Any, training: bool
    ) -> Forward:
        if training:
            batch = view1.shape[0] if view1.shape[0] is not None else tf.shape(view1)[0]
            per_step = keys_per_step(batch, context.accumulation_steps)
            checks = check_queue_fits(context.options["queue_size"], per_step, self.display_name)
            with tf.control_dependencies(checks):
                view1, view2 = tf.identity(view1), tf.identity(view2)
        queries = context.projector(context.backbone(view1, training=training), training=training)

        def key_encoder(view: Any) -> tuple:
            features = context.teacher_backbone(view, training=training)
            return (context.teacher_projector(features, training=training),)

        (keys,) = context.encode_keys(key_encoder, view2, training=training)
        dtype = computation_dtype(queries.dtype)
        keys = l2_normalize(tf.stop_gradient(tf.cast(keys, dtype)), axis=1)
        queue = tf.cast(context.state["queue"], dtype)
        value = loss(tf.concat([keys, queue], axis=0), queries)
        (gathered,) = gather_global_batch(keys)
        return Forward(value, queries, statistics={"keys": gathered})

    def after_update(self, context: MethodContext, statistics: dict[str, Any] | None) -> None:
        enqueue(context.state["queue"], statistics["keys"])
        super().after_update(context, statistics)
