"""DINO: self-distillation with a centred, sharpened momentum teacher (Caron et al., ICCV 2021)."""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity import losses
from tensorflow_similarity.collectives import global_sum, sync_replica_context
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin
from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm, Forward
from tensorflow_similarity.models.algorithms.context import MethodContext
from tensorflow_similarity.models.algorithms.registry import register_algorithm
from tensorflow_similarity.models.dino_head import WeightNormalizedDense, build_dino_head
from tensorflow_similarity.models.mlp_heads import ProjectorSpec
from tensorflow_similarity.models.momentum import assign_on_every_replica, check_momentum

_BOTTLENECK_DIM = 256


@register_algorithm
class DINO(ContrastiveAlgorithm):
    """DINO: the student's softmax over `K` prototypes matches the teacher's, centred and sharpened.

    Heads: DINO's projection head (`build_dino_head`: a 3-layer GELU MLP
    2048-2048-256, L2 normalisation, a weight-normalised layer to `K`
    prototypes, 65,536 on ResNet-50); no predictor; the teacher copies the
    backbone and head, base momentum 0.996. Forward: the teacher sees the two
    global views, the student those and any multi-crop local views
    (`local_views`, run as one batch); the teacher's outputs are centred by
    the method's state `dino_center` (saved with the model as
    `contrastive_model/dino_center`) and sharpened by the teacher temperature
    (`losses.dino_teacher_probabilities`), and `DINOLoss` (student
    temperature 0.1) averages the cross-entropy over every pair of
    different views. After each optimizer step the centre moves to
    `c * m_c + (1 - m_c) * mean`, the mean of the teacher's outputs over the
    global batch of the step (all its accumulated batches), then the teacher
    moves.

    Options (`algorithm_options`), with the paper's defaults:

    - `warmup_teacher_temperature` (0.04) rising linearly to
      `teacher_temperature` (0.07) over `warmup_teacher_temperature_epochs`
      (30) epochs of optimizer steps;
    - `center_momentum` (0.9);
    - `freeze_last_layer_epochs` (1): the prototypes' layer gets no gradient
      for that many epochs;
    - `clip_grad` (3.0): each variable's gradient (the global batch's) is
      scaled down to at most this norm; 0 turns clipping off.

    Epochs are counted in optimizer steps from the steps per epoch `fit` was
    given. Monitor: `teacher_entropy`, the mean entropy of the teacher's
    distribution over the global batch (0 when it collapses to one
    prototype, `log K` when it collapses to uniform).
    """

    name = "dino"
    title = "DINO"
    projector = ProjectorSpec(hidden_layers=2, hidden_dim=2048, output_dim=65536, output_bn=None)
    concat_views = False
    base_momentum = 0.996
    uses_local_crops = True
    option_defaults = {
        "warmup_teacher_temperature": 0.04,
        "teacher_temperature": 0.07,
        "warmup_teacher_temperature_epochs": 30,
        "center_momentum": 0.9,
        "freeze_last_layer_epochs": 1,
        "clip_grad": 3.0,
    }
    # The teacher temperature warms up over 30 of the paper's 100 or more epochs: a third.
    warmup_fraction = 0.3
    paper = "Caron et al., 2021"
    prevents_collapse = "the teacher's outputs are centred and sharpened"
    across_replicas = "the centre is a moving mean over the global batch (one all-reduce)"
    statistic_rules = {"teacher_sums": "sum"}

    def default_loss(self) -> keras.losses.Loss:
        return losses.DINOLoss()

    def resolve_options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        resolved = super().resolve_options(options)
        owner = "DINO algorithm_options"
        for key in ("warmup_teacher_temperature", "teacher_temperature"):
            value = resolved[key]
            if not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
                raise ValueError(f"{owner}: {key} must be a positive number, got {value!r}.")
        for key in ("warmup_teacher_temperature_epochs", "freeze_last_layer_epochs"):
            value = resolved[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{owner}: {key} must be an int >= 0, got {value!r}.")
        check_momentum("center_momentum", resolved["center_momentum"], owner)
        clip = resolved["clip_grad"]
        if not isinstance(clip, (int, float)) or not clip >= 0 or not math.isfinite(clip):
            raise ValueError(f"{owner}: clip_grad must be a number >= 0 (0: off), got {clip!r}.")
        return resolved

    def projector_from_spec(
        self,
        input_dim: int,
        spec: ProjectorSpec,
        sync_bn: bool | SyncBatchNormPlugin,
        name: str,
        activation: Any,
    ) -> keras.Model:
        """DINO's head (GELU throughout); `spec.output_dim` is the number of prototypes `K`."""
        del activation
        return build_dino_head(
            input_dim,
            output_dim=spec.output_dim,
            hidden_dim=spec.hidden_dim,
            bottleneck_dim=_BOTTLENECK_DIM,
            hidden_layers=spec.hidden_layers,
            sync_bn=sync_bn,
            name=name,
        )

    def options_in_epochs(self, options: dict[str, Any]) -> dict[str, Any]:
        keys = ("warmup_teacher_temperature_epochs", "freeze_last_layer_epochs")
        return {key: options[key] for key in keys if options[key] > 0}

    def run_options(self, epochs: int) -> dict[str, Any]:
        """The teacher temperature warmed up over `warmup_fraction` of a run of `epochs`."""
        return {"warmup_teacher_temperature_epochs": int(self.warmup_fraction * epochs)}

    def monitor_names(self) -> tuple[str, ...]:
        return ("teacher_entropy",)

    def create_state(self, context: MethodContext) -> None:
        # The name keeps the centre's saved path, `contrastive_model/dino_center`.
        context.add_state("dino_center", (context.projector.outputs[0].shape[-1],))

    def teacher_temperature(self, context: MethodContext, step: Any) -> tf.Tensor:
        """The teacher temperature at optimizer step `step` (linear warm-up, then constant)."""
        options = context.options
        start, end = options["warmup_teacher_temperature"], options["teacher_temperature"]
        warmup = tf.cast(options["warmup_teacher_temperature_epochs"], tf.float64) * tf.cast(
            context.steps_per_epoch, tf.float64
        )
        progress = tf.where(
            warmup > 0, tf.minimum(tf.cast(step, tf.float64) / tf.maximum(warmup, 1.0), 1.0), 1.0
        )
        return start + (end - start) * progress

    def forward(
        self,
        context: MethodContext,
        view1: Any,
        view2: Any,
        loss: Any,
        training: bool,
        local_views: Any = None,
    ) -> Forward:
        t1, t2 = self.teacher_project(context, view1, view2, training)
        # Centring and the low temperature magnify float16's rounding: both run in float32.
        dtype = keras.backend.result_type(t1.dtype, "float32")
        teacher = tf.cast(tf.stack([t1, t2], axis=1), dtype)
        temperature = tf.cast(self.teacher_temperature(context, context.step), teacher.dtype)
        center = tf.cast(context.state["dino_center"], teacher.dtype)
        probabilities = losses.dino_teacher_probabilities(teacher, center, temperature)
        s1, s2 = self.project(context, view1, view2, training)
        student = [tf.stack([s1, s2], axis=1)]
        if local_views is not None:
            student.append(self._local_logits(context, local_views, training))
        student = tf.concat(student, axis=1)
        value = loss(probabilities, student)
        rows = tf.cast(tf.shape(teacher)[0] * 2, teacher.dtype)
        sums = global_sum(tf.concat([tf.reduce_sum(teacher, axis=[0, 1]), rows[None]], axis=0))
        entropy = -tf.reduce_sum(probabilities * tf.math.log(probabilities + 1e-30), axis=-1)
        entropy = global_sum(tf.stack([tf.reduce_sum(entropy), rows]))
        monitors = {"teacher_entropy": tf.cast(entropy[0] / tf.maximum(entropy[1], 1.0), "float32")}
        return Forward(value, s1, None, {"teacher_sums": sums}, monitors)

    @staticmethod
    def _local_logits(context: MethodContext, local_views: Any, training: bool) -> tf.Tensor:
        """The student's logits `[n, n_local, K]` of the local crops, run as one batch."""
        n_local = local_views.shape[1]
        crops = tf.experimental.numpy.swapaxes(local_views, 0, 1)  # Crop-major, as DINO.
        flat = tf.reshape(crops, tf.concat([[-1], tf.shape(local_views)[2:]], axis=0))
        logits = context.projector(context.backbone(flat, training=training), training=training)
        logits = tf.reshape(logits, [n_local, -1, logits.shape[-1]])
        return tf.experimental.numpy.swapaxes(logits, 0, 1)

    def adjust_gradients(self, context: MethodContext, gradients: list, variables: list) -> list:
        options = context.options
        frozen = {id(v) for v in _prototype_weights(context.projector)}
        freeze_steps = tf.cast(options["freeze_last_layer_epochs"], tf.int64) * tf.cast(
            context.steps_per_epoch, tf.int64
        )
        frozen_now = tf.cast(context.step, tf.int64) < freeze_steps
        gradients = [
            tf.where(frozen_now, tf.zeros_like(g), g) if g is not None and id(v) in frozen else g
            for g, v in zip(gradients, variables, strict=True)
        ]
        if options["clip_grad"] > 0:
            gradients = _clip_each(gradients, options["clip_grad"], context.optimizer)
        return gradients

    def after_update(self, context: MethodContext, statistics: dict[str, Any] | None) -> None:
        sums = statistics["teacher_sums"]
        mean = sums[:-1] / tf.maximum(sums[-1], 1.0)
        center = context.state["dino_center"]
        new_center = losses.dino_center_update(
            tf.cast(center, mean.dtype), mean, context.options["center_momentum"]
        )
        assign_on_every_replica([center], [new_center])
        super().after_update(context, statistics)


def _prototype_weights(projector: keras.Model) -> list:
    return [
        w
        for layer in projector.layers
        if isinstance(layer, WeightNormalizedDense)
        for w in layer.trainable_weights
    ]


def _clip_each(gradients: list, max_norm: float, optimizer: Any) -> list:
    """DINO's clipping: each variable's global gradient scaled to a norm of at most `max_norm`.

    The norms are those of the gradients summed over replicas (one
    all-reduce); each replica scales its own gradient by its variable's
    factor, so the optimizer's sum is the clipped global gradient. Under loss
    scaling the bound is scaled alike.
    """
    present = [i for i, g in enumerate(gradients) if g is not None]
    if not present:
        return gradients
    ctx = sync_replica_context()
    summed = [gradients[i] for i in present]
    if ctx is not None:  # One batched all-reduce of every gradient.
        summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, summed)
    bound = max_norm
    if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
        # The scale `scale_loss` used: before its first step the optimizer has no variable yet.
        scale = optimizer.dynamic_scale if optimizer.built else optimizer.initial_scale
        bound = max_norm * tf.cast(scale, tf.float32)
    clipped = list(gradients)
    for i, total in zip(present, summed, strict=True):
        norm = tf.norm(total)
        factor = tf.minimum(tf.cast(bound, norm.dtype) / (norm + 1e-6), 1.0)
        clipped[i] = gradients[i] * factor
    return clipped
