"""`ContrastiveModel`'s training step: its micro-batches, the method's hooks, its metrics."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.collectives import global_sum
from tensorflow_similarity.l2_normalize import l2_normalize
from tensorflow_similarity.models.accumulation import split_micro_batches
from tensorflow_similarity.models.algorithms import STATISTIC_RULES, Forward, MethodContext
from tensorflow_similarity.models.cached_contrastive_step import cached_contrastive_gradients
from tensorflow_similarity.models.non_finite import nan_unless_finite
from tensorflow_similarity.models.view_pairs import split_crops

__all__ = ["ContrastiveStepMixin", "combine_statistics"]


class ContrastiveStepMixin:
    """The training and test steps of `ContrastiveModel` (see its docstring for their meaning).

    The model sets `backbone`, `projector`, `predictor`, the teacher's
    networks (or `None`), `_method` (its algorithm), `_method_state` (the
    method's variables by name), `_views_concatenated`, `algorithm_options`,
    `accumulation_steps`, `augmenter`, `_default_loss` and the metric trackers.
    The algorithm sees the model only through `_method_context`.
    """

    def _method_context(self, create: bool = False) -> MethodContext:
        """The `MethodContext` of the method's hooks; with `create`, one that can add state."""
        teacher = self.teacher_backbone is not None
        return MethodContext(
            backbone=self.backbone,
            projector=self.projector,
            predictor=self.predictor,
            teacher_backbone=self.teacher_backbone,
            teacher_projector=self.teacher_projector,
            concat_views=self._views_concatenated,
            options=self.algorithm_options,
            state=self._method_state,
            optimizer=getattr(self, "optimizer", None),  # None before compile.
            steps_per_epoch=self.steps_per_epoch if teacher else 0,
            teacher_momentum=self.teacher_momentum if teacher else None,
            teacher_pairs=self.teacher_pairs if teacher else None,
            create_variable=self.add_weight if create else None,
            shuffle_seed=self.shuffle_seed if self.bn == "shuffle" else None,
            accumulation_steps=self.accumulation_steps,
        )

    @property
    def metrics(self) -> list[keras.metrics.Metric]:
        trackers = [self.loss_tracker, self.proj_std_tracker]
        if self.pred_std_tracker is not None:
            trackers.append(self.pred_std_tracker)
        return trackers + list(self.monitor_trackers)

    def micro_batch_gradients(self, data: Any) -> tuple[list, tf.Tensor, Forward]:
        """The gradients of one batch's share of an optimizer step, applying nothing.

        What `train_step` sums over its `accumulation_steps` batches: the
        gradients of this replica's share of the batch's loss divided by
        `accumulation_steps` (plus the regularisation losses likewise),
        with respect to `trainable_variables`. Batch norms in training mode
        update their moving statistics; nothing else changes.
        With `chunk_size`, the views run through the networks in chunks
        (`cached_contrastive_step.cached_contrastive_gradients`).

        Args:
            data: One batch, as `fit` gives it (see `split_views`).

        Returns:
            `(gradients, share, forward)`: the gradients, this replica's share
            of the batch's loss (not divided by `accumulation_steps`), and the
            algorithm's `Forward`.
        """
        view1, view2, local_views = self._views(data)
        replicas = tf.cast(_num_replicas(), tf.float32)
        parts = 1.0 / self.accumulation_steps
        if getattr(self, "chunk_size", None) is not None:
            loss = self.loss if self.loss is not None else self._default_loss
            return cached_contrastive_gradients(self, view1, view2, loss, parts)
        with tf.GradientTape() as tape:
            # This replica's share of the global loss: Keras losses already divide by
            # the number of replicas, so the optimizer's sum over replicas is the whole.
            forward = self._forward(view1, view2, local_views, training=True)
            share = nan_unless_finite(forward.loss, (view1, view2), self.weights)
            total = share
            if self.losses:
                regularization = tf.add_n([tf.cast(x, tf.float32) for x in self.losses])
                total = total + regularization / replicas
            total = total * parts
            if self.optimizer is not None:
                total = self.optimizer.scale_loss(total)
        gradients = tape.gradient(total, self.trainable_variables)
        return gradients, share, forward

    def train_step(self, data):
        variables = self.trainable_variables
        replicas = tf.cast(_num_replicas(), tf.float32)
        summed, statistics = None, []
        for part in split_micro_batches(data, self.accumulation_steps):
            gradients, share, forward = self.micro_batch_gradients(part)
            summed = gradients if summed is None else _add_all(summed, gradients)
            statistics.append(forward.statistics)
            logs = self._update_metrics(share * replicas, forward)
        context = self._method_context()
        summed = self._method.adjust_gradients(context, summed, variables)
        self.optimizer.apply_gradients(zip(summed, variables, strict=True))
        combined = combine_statistics(statistics, self._method.statistic_rules)
        self._method.after_update(context, combined)
        return logs

    def test_step(self, data):
        view1, view2, local_views = self._views(data)
        forward = self._forward(view1, view2, local_views, training=False)
        return self._update_metrics(forward.loss * tf.cast(_num_replicas(), tf.float32), forward)

    def _views(self, data):
        view1, view2, local_views = split_crops(data, self._image_rank(), self.augmenter)
        if local_views is not None and not self._method.uses_local_crops:
            raise ValueError(
                f"{self._method.display_name} takes two views per image, but the batches "
                f"hold {local_views.shape[1]} local crops too. Only methods that use "
                "multi-crop (DINO) take them: make two views, e.g. with n_local=0."
            )
        return view1, view2, local_views

    def _forward(self, view1, view2, local_views, training) -> Forward:
        loss = self.loss if self.loss is not None else self._default_loss
        crops = {"local_views": local_views} if self._method.uses_local_crops else {}
        context = self._method_context()
        forward = self._method.forward(context, view1, view2, loss, training, **crops)
        return forward._replace(loss=tf.cast(forward.loss, tf.float32))

    def _update_metrics(self, loss, forward: Forward):
        self.loss_tracker.update_state(loss)
        self.proj_std_tracker.update_state(_normalised_std(forward.projection))
        if forward.prediction is not None and self.pred_std_tracker is not None:
            self.pred_std_tracker.update_state(_normalised_std(forward.prediction))
        monitors = forward.monitors or {}
        for tracker in self.monitor_trackers:
            tracker.update_state(monitors[tracker.name])
        results = {m.name: m.result() for m in self.metrics}
        if _multi_worker():
            # Keras 3 reduces logs across workers with `reduce(MEAN, axis=0)`, which
            # fails on scalars (keras-team/keras#20585): give each a batch axis.
            results = {name: tf.reshape(value, [1]) for name, value in results.items()}
        return results


def combine_statistics(
    parts: list[dict[str, Any] | None], rules: Mapping[str, str]
) -> dict[str, Any] | None:
    """Combines the `Forward.statistics` of a step's micro-batches, each key by its rule.

    `"sum"` adds a key's values in micro-batch order; `"concat"` concatenates
    them along their first axis in micro-batch order, which for rows
    gathered over the replicas is the order of the step's global batch.

    Args:
        parts: Each micro-batch's statistics, in order (`None` where none).
        rules: The method's `statistic_rules`: key -> `"sum"` or `"concat"`.

    Returns:
        The combined statistics, or `None` when no micro-batch has any.

    Raises:
        ValueError: For a key without a rule, or a rule other than `"sum"`
            and `"concat"`.
    """
    present = [part for part in parts if part is not None]
    if not present:
        return None
    unruled = sorted(set().union(*present) - set(rules))
    if unruled:
        raise ValueError(
            f"Forward.statistics {', '.join(map(repr, unruled))} have no rule: the step must "
            "know how to combine them over accumulated micro-batches. Declare them in the "
            "method's statistic_rules, e.g. statistic_rules = {'sums': 'sum', 'keys': 'concat'}."
        )
    combined = {}
    for key in present[0]:
        values = [part[key] for part in present]
        if rules[key] == "sum":
            combined[key] = functools.reduce(lambda total, value: total + value, values)
        elif rules[key] == "concat":
            combined[key] = tf.concat(values, axis=0)
        else:
            raise ValueError(
                f"statistic_rules[{key!r}] is {rules[key]!r}; use one of {STATISTIC_RULES}."
            )
    return combined


def _add_all(a: list, b: list) -> list:
    return [x if y is None else y if x is None else x + y for x, y in zip(a, b, strict=True)]


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
