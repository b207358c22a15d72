"""`ContrastiveModel(chunk_size=C)`: a self-supervised step on cached embeddings (GradCache).

The views of each replica's batch run through the student `chunk_size`
samples at a time, twice (see `cached_embeddings.cached_embedding_step`):
once without a tape for the outputs the loss takes, and once per chunk under
a tape that backpropagates the chunk's rows of the loss's gradient. A
momentum teacher's outputs take no gradient, so they are computed chunk by
chunk once, before the student's (`cached_embeddings.embed_in_chunks`).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tensorflow_similarity.models.algorithms import ContrastiveAlgorithm, Forward
from tensorflow_similarity.models.cached_embeddings import (
    cached_embedding_step,
    check_chunk_size,
    embed_in_chunks,
)
from tensorflow_similarity.models.non_finite import nan_unless_finite

__all__ = ["cached_contrastive_gradients", "check_contrastive_chunk_size"]


def check_contrastive_chunk_size(
    chunk_size: Any, method: ContrastiveAlgorithm, owner: str = "ContrastiveModel"
) -> int | None:
    """Returns `chunk_size` checked for `method`, or raises before anything is built.

    A method can train on cached embeddings when its forward pass is the
    default composition (`ContrastiveAlgorithm.splits_forward`): per-sample
    outputs of the student (and of the teacher), then one loss of the whole
    batch's outputs. Every method that keeps the base class's `forward` is;
    a method that overrides it is refused by name (DINO: its multi-crop pass
    and its centre's statistics are its own; MoCo v2 and SwAV: their queues).

    Args:
        chunk_size: `None` or a positive integer: the samples per chunk.
        method: The model's algorithm.
        owner: The class or function the user called, for the message.

    Returns:
        `None`, or `int(chunk_size)`.

    Raises:
        ValueError: For anything but `None` or a positive integer, or for a
            method whose forward pass does not split into per-sample outputs
            and a loss.
    """
    chunk_size = check_chunk_size(chunk_size, owner)
    if chunk_size is not None and not method.splits_forward:
        raise ValueError(
            f"{owner}: {method.display_name} cannot train with chunk_size={chunk_size}: its "
            "forward pass is its own (it overrides forward), so it does not split into "
            "per-sample outputs that can be embedded chunk by chunk and one loss of the whole "
            "batch's outputs. Train it without chunk_size, or give the method "
            "student_outputs, teacher_outputs and loss_of_outputs instead of forward."
        )
    return chunk_size


def cached_contrastive_gradients(
    model: Any, view1: tf.Tensor, view2: tf.Tensor, loss: Any, scale: float
) -> tuple[list, tf.Tensor, Forward]:
    """A `ContrastiveModel` micro-batch's gradients, its views embedded `chunk_size` at a time.

    The same as the model's one-pass `micro_batch_gradients` (its share of
    the loss, regularisation over the replicas, times `scale`, scaled by the
    optimizer), with the student's outputs computed by
    `cached_embedding_step` and the teacher's by `embed_in_chunks`. The
    student's non-trainable variables (moving statistics, seed states) are
    restored between the passes; the teacher's batch norms normalise each
    chunk alone and update their moving statistics once per chunk.

    Args:
        model: The `ContrastiveModel`, with a `chunk_size`.
        view1: This replica's first views of the micro-batch.
        view2: Its second views.
        loss: The loss of the two views' outputs.
        scale: The factor of the micro-batch's loss (`1 / accumulation_steps`).

    Returns:
        `(gradients, share, forward)`, as `micro_batch_gradients` returns them.

    Raises:
        ValueError: When the forward pass adds losses of the activations
            (`activity_regularizer`), or `chunk_size` does not divide the
            replica's batch (when the step is traced).
    """
    method = model._method
    context = model._method_context()
    views = (view1, view2)
    owner = model.name
    teacher = None
    if model.teacher_backbone is not None:
        teacher = embed_in_chunks(
            lambda v: method.teacher_outputs(context, v[0], v[1], True),
            views,
            model.chunk_size,
            owner,
        )
    students = [m for m in (model.backbone, model.projector, model.predictor) if m is not None]
    state = [v for network in students for v in network.non_trainable_variables]
    replicas = tf.cast(tf.distribute.get_strategy().num_replicas_in_sync, tf.float32)
    found = {}

    def embed(chunk: tuple) -> dict[str, Any]:
        outputs = method.student_outputs(context, chunk[0], chunk[1], True)
        _refuse_forward_losses(model)
        return outputs

    def loss_fn(outputs: dict[str, Any]) -> tf.Tensor:
        forward = method.loss_of_outputs(context, outputs, teacher, loss)
        forward = forward._replace(loss=tf.cast(forward.loss, tf.float32))
        share = nan_unless_finite(forward.loss, views, model.weights)
        total = share
        if model.losses:  # Weight regularisation only: _refuse_forward_losses saw to it.
            regularization = tf.add_n([tf.cast(x, tf.float32) for x in model.losses])
            total = total + regularization / replicas
        total = total * scale
        if model.optimizer is not None:
            total = model.optimizer.scale_loss(total)
        found.update(share=share, forward=forward)
        return total

    step = cached_embedding_step(
        embed, views, loss_fn, model.chunk_size, model.trainable_variables, state, owner
    )
    return step.gradients, found["share"], found["forward"]


def _refuse_forward_losses(model: Any) -> None:
    """Raises when the last forward pass added losses besides weight regularisation."""
    regularized = sum(
        1 for v in model.trainable_weights if getattr(v, "regularizer", None) is not None
    )
    added = len(model.losses) - regularized
    if added > 0:
        raise ValueError(
            f"{model.name!r} has chunk_size={model.chunk_size}, and its forward pass adds "
            f"{added} loss(es) (activity_regularizer or add_loss in a layer's call). Cached "
            "embeddings take the loss of the views' outputs only: a loss of the activations "
            "has no value on one chunk's activations that adds up to the batch's. Remove it "
            "(weight regularizers are fine), or train without chunk_size."
        )
