"""SwAV: swapped prediction of Sinkhorn-Knopp cluster codes (Caron et al., NeurIPS 2020)."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity import losses
from tensorflow_similarity._validation import is_int
from tensorflow_similarity.collectives import gather_global_batch, global_sum
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm, Forward
from tensorflow_similarity.models.algorithms.context import MethodContext
from tensorflow_similarity.models.algorithms.queue import (
    appended,
    check_queue_fits,
    keys_per_step,
)
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.dino_head import WeightNormalizedDense
from tensorflow_similarity.models.mlp_heads import ProjectorSpec, mlp_projector
from tensorflow_similarity.models.momentum import assign_on_every_replica

# SwAV's embedding (the prototypes' input) is 128-d whatever the backbone.
_EMBEDDING_DIM = 128


@keras.saving.register_keras_serializable(package="Similarity")
class _L2Normalize(keras.layers.Layer):
    """Scales each row to unit L2 norm (SwAV's embedding before the prototypes)."""

    def call(self, inputs):
        return l2_normalize(inputs, axis=-1)


@register_algorithm
class SwAV(ContrastiveAlgorithm):
    """SwAV: each view's prototype scores predict the Sinkhorn-Knopp codes of the other views.

    Heads: SwAV's projector, an MLP (2048-d hidden layer with batch norm and
    ReLU, a 128-d output on ResNet-50), L2 normalisation, then the
    prototypes, a weight-normalised layer without bias to `K` outputs (3,000
    in the paper; the projector's `output_dim`), so that the scores are
    cosine similarities; no predictor and no teacher. Forward: the scores of
    the two views (and of any multi-crop local views, `local_views`, run as
    one batch) go to `SwAVLoss` (temperature 0.1), whose codes are
    `losses.sinkhorn_knopp` (epsilon 0.05, 3 iterations) of the two global
    views over the global batch, computed in float32 whatever the policy.

    The queue (SwAV's for small batches) is the method's state `queue`,
    `[queue_size, 2, 128]`, the two global views' embeddings of earlier
    steps, and `queue_rows`, how many it holds: from optimizer step
    `queue_start_step` on, each step appends its global batch's embeddings,
    gathered in global batch order (oldest rows first); once full, its rows'
    scores against the current prototypes join Sinkhorn-Knopp's sums over
    samples (once, whatever the number of replicas) and get no term, as
    `SwAVLoss` documents.

    Options (`algorithm_options`), with the reference code's defaults:

    - `queue_size` (0: no queue): rows of the queue; a positive size must be
      a multiple of the rows one optimizer step enqueues, the global batch
      times `accumulation_steps` (refused as MoCo v2's is: a `ValueError`
      when the step is traced, before any training);
    - `queue_start_step` (0): the first optimizer step (0-based) whose
      embeddings are enqueued;
    - `freeze_prototypes_steps` (313): the prototypes get no gradient in
      the optimizer steps before this one (`main_swav.py`'s
      `freeze_prototypes_niters`). Both count optimizer steps because a
      method without a teacher is not told an epoch's length.

    Monitor: `code_entropy`, the entropy of the first view's mean
    prediction (`softmax(scores / T)`) over the global batch: `log K` when
    the samples spread over all the prototypes, 0 when they all fall in one.
    """

    name = "swav"
    title = "SwAV"
    projector = ProjectorSpec(hidden_layers=1, hidden_dim=2048, output_dim=3000, output_bn=None)
    concat_views = True
    uses_local_crops = True
    option_defaults = {"queue_size": 0, "queue_start_step": 0, "freeze_prototypes_steps": 313}
    statistic_rules = {"embeddings": "concat"}
    paper = "Caron et al., 2020"
    prevents_collapse = "the codes spread the batch equally over the prototypes (Sinkhorn-Knopp)"
    across_replicas = "Sinkhorn-Knopp over the global batch (one all-reduce per iteration)"

    def default_loss(self) -> keras.losses.Loss:
        return losses.SwAVLoss()

    def resolve_options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        resolved = super().resolve_options(options)
        for key in self.option_defaults:
            value = resolved[key]
            if not is_int(value) or value < 0:
                raise ValueError(
                    f"SwAV algorithm_options: {key} must be an int >= 0, got {value!r}."
                )
        return resolved

    def projector_from_spec(
        self,
        input_dim: int,
        spec: ProjectorSpec,
        sync_bn: bool | SyncBatchNormPlugin,
        name: str,
        activation: Any,
    ) -> keras.Model:
        """SwAV's head: the MLP to 128-d, L2 normalisation, then `spec.output_dim` prototypes."""
        mlp_spec = ProjectorSpec(spec.hidden_layers, spec.hidden_dim, _EMBEDDING_DIM, None)
        mlp = mlp_projector(input_dim, mlp_spec, sync_bn, f"{name}_mlp", activation)
        inputs = keras.Input((input_dim,), name=f"{name}_input")
        embedding = _L2Normalize(name=f"{name}_l2")(mlp(inputs))
        scores = WeightNormalizedDense(spec.output_dim, name=f"{name}_prototypes")(embedding)
        return keras.Model(inputs, scores, name=name)

    def check_heads(self, projector: keras.Model, predictor: keras.Model | None) -> None:
        super().check_heads(projector, predictor)
        if not isinstance(projector.layers[-1], WeightNormalizedDense):
            raise ValueError(
                "SwAV's projector must end in its prototypes, a WeightNormalizedDense layer "
                f"(models.dino_head), but {projector.name!r} ends in "
                f"{type(projector.layers[-1]).__name__}. Build the heads with "
                "create_contrastive_model(backbone, 'swav')."
            )

    def monitor_names(self) -> tuple[str, ...]:
        return ("code_entropy",)

    def create_state(self, context: MethodContext) -> None:
        size = context.options["queue_size"]
        width = _prototypes(context.projector).input.shape[-1]
        context.add_state("queue", (size, 2, width))
        context.add_state("queue_rows", (), dtype="int64")

    def forward(
        self,
        context: MethodContext,
        view1: Any,
        view2: Any,
        loss: Any,
        training: bool,
        local_views: Any = None,
    ) -> Forward:
        size = context.options["queue_size"]
        if training and size:
            batch = view1.shape[0] if view1.shape[0] is not None else tf.shape(view1)[0]
            checks = check_queue_fits(
                size, keys_per_step(batch, context.accumulation_steps), self.display_name
            )
            with tf.control_dependencies(checks):
                view1, view2 = tf.identity(view1), tf.identity(view2)
        prototypes = _prototypes(context.projector)
        embed = keras.Model(context.projector.inputs, prototypes.input)
        h1, h2 = context.encode_views(view1, view2, context.backbone, training)
        z1, z2 = context.encode_views(h1, h2, embed, training)
        scores = [tf.stack([prototypes(z1), prototypes(z2)], axis=1)]
        if local_views is not None:
            scores.append(self._local_scores(context, local_views, training))
        scores = tf.concat(scores, axis=1)
        code_scores = scores[:, :2]
        if size:
            queue = tf.cast(context.state["queue"], z1.dtype)
            queue_scores = tf.reshape(prototypes(tf.reshape(queue, [size * 2, -1])), [size, 2, -1])
            full = tf.logical_and(training, tf.greater_equal(context.state["queue_rows"], size))
            queue_scores = queue_scores[: tf.where(full, size, 0)]
            code_scores = tf.concat([tf.cast(queue_scores, scores.dtype), code_scores], axis=0)
        value = loss(code_scores, scores)
        (embeddings,) = gather_global_batch(tf.stop_gradient(tf.stack([z1, z2], axis=1)))
        monitors = {"code_entropy": _code_entropy(scores[:, 0], loss)}
        return Forward(value, z1, None, {"embeddings": embeddings}, monitors)

    @staticmethod
    def _local_scores(context: MethodContext, local_views: Any, training: bool) -> tf.Tensor:
        """The scores `[n, n_local, K]` of the local crops, run as one batch, crop-major."""
        n_local = local_views.shape[1]
        crops = tf.experimental.numpy.swapaxes(local_views, 0, 1)
        flat = tf.reshape(crops, tf.concat([[-1], tf.shape(local_views)[2:]], axis=0))
        scores = context.projector(context.backbone(flat, training=training), training=training)
        scores = tf.reshape(scores, [n_local, -1, scores.shape[-1]])
        return tf.experimental.numpy.swapaxes(scores, 0, 1)

    def adjust_gradients(self, context: MethodContext, gradients: list, variables: list) -> list:
        frozen = {id(v) for v in _prototypes(context.projector).trainable_weights}
        frozen_now = tf.cast(context.step, tf.int64) < context.options["freeze_prototypes_steps"]
        return [
            tf.where(frozen_now, tf.zeros_like(g), g) if g is not None and id(v) in frozen else g
            for g, v in zip(gradients, variables, strict=True)
        ]

    def after_update(self, context: MethodContext, statistics: dict[str, Any] | None) -> None:
        size = context.options["queue_size"]
        if not size:
            return
        queue, rows = context.state["queue"], context.state["queue_rows"]
        embeddings = statistics["embeddings"]
        # The step just applied is optimizer step `iterations - 1` (0-based).
        started = tf.cast(context.step, tf.int64) - 1 >= context.options["queue_start_step"]
        count = tf.shape(embeddings, out_type=tf.int64)[0]
        new_queue = appended(queue, embeddings)
        assign_on_every_replica(
            [queue, rows],
            [
                tf.where(started, new_queue, queue.value),
                tf.where(started, tf.minimum(rows.value + count, size), rows.value),
            ],
        )


def _prototypes(projector: keras.Model) -> WeightNormalizedDense:
    return projector.layers[-1]


def _code_entropy(scores: tf.Tensor, loss: Any) -> tf.Tensor:
    """The entropy of the mean prediction over the global batch (one all-reduce).

    The predictions are `softmax(scores / T)`, `T` the loss's temperature:
    all samples in one prototype give 0, an even spread `log K`.
    """
    temperature = getattr(loss, "temperature", 0.1)
    predictions = tf.nn.softmax(tf.cast(tf.stop_gradient(scores), tf.float32) / temperature)
    rows = tf.cast(tf.shape(predictions)[:1], tf.float32)
    sums = global_sum(tf.concat([tf.reduce_sum(predictions, axis=0), rows], axis=0))
    mean = sums[:-1] / tf.maximum(sums[-1], 1.0)
    return -tf.reduce_sum(mean * tf.math.log(mean + 1e-30))
