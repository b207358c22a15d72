"""The momentum teacher of a model: its copy of the student, its schedule, its outputs."""

from __future__ import annotations

import math
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.models.momentum import clone_network, cosine_momentum

__all__ = ["MomentumTeacherMixin"]


class MomentumTeacherMixin:
    """The momentum teacher of a model with a `backbone` and a `projector`.

    `ContrastiveModel` mixes it in for the methods with a teacher (BYOL,
    MoCo v3, DINO): `teacher_backbone` and `teacher_projector` are copies of
    the student's networks whose variables are not trainable and are left out
    of `trainable_weights` and `trainable_variables`, so that the optimizer
    never sees them; the algorithm moves them after each optimizer step
    (`teacher_pairs`, `teacher_momentum`). `schedule_steps` holds the run's
    optimizer steps and the steps of an epoch, set by `fit` (see
    `_set_schedule`) and saved with the model.

    After each optimizer step every teacher weight moves to
    `m * teacher + (1 - m) * student`, on every replica alike, with `m` rising
    from the model's `momentum` to 1 along the cosine schedule over the run's
    optimizer steps (`total_steps`, or what `fit` is asked for: `epochs` times
    the steps of an epoch, whatever `initial_epoch` is). The teacher runs in
    training mode, so its batch norms normalise with the batch's statistics
    and keep their own moving statistics.

    The model sets `backbone`, `projector`, `momentum`, `total_steps` and
    `_method` (its algorithm) before `_create_teacher`, and sets
    `teacher_backbone` and `teacher_projector` to `None` for a method without a
    teacher.
    """

    def _create_teacher(self) -> None:
        """Makes the teacher's copies and the schedule's step counts (teacher methods only)."""
        self.teacher_backbone = clone_network(self.backbone, "teacher_backbone")
        self.teacher_projector = clone_network(self.projector, "teacher_projector")
        for network in (self.teacher_backbone, self.teacher_projector):
            # The layers stay trainable, so that batch norm runs in training mode; the
            # variables are not, so that the optimizer never sees them.
            for variable in network.trainable_weights:
                variable.trainable = False
        self.schedule_steps = self.add_weight(
            name="schedule_steps",
            shape=(2,),
            dtype="int64",
            initializer=keras.initializers.Constant([self.total_steps or 0, 0]),
            trainable=False,
        )

    def _teacher_weights(self) -> list:
        networks = (self.teacher_backbone, self.teacher_projector)
        return [w for network in networks if network is not None for w in network.weights]

    def _without_teacher(self, variables: list) -> list:
        teacher = {id(w) for w in self._teacher_weights()}
        return [v for v in variables if id(v) not in teacher]

    # The teacher's weights are never the optimizer's, even after `model.trainable` is set
    # back to `True` (which marks every variable of the model trainable again).
    @property
    def trainable_weights(self) -> list:
        return self._without_teacher(super().trainable_weights)

    @property
    def trainable_variables(self) -> list:
        return self._without_teacher(super().trainable_variables)

    @property
    def non_trainable_weights(self) -> list:
        kept = {id(v) for v in self.trainable_weights}
        return [v for v in self.weights if id(v) not in kept]

    def teacher_pairs(self) -> tuple[list, list]:
        """The teacher's weights and the student's they follow, in matching order."""
        teachers, students = [], []
        for teacher, student in (
            (self.teacher_backbone, self.backbone),
            (self.teacher_projector, self.projector),
        ):
            teachers.extend(teacher.weights[i] for i in _trainable_indices(student))
            students.extend(student.trainable_weights)
        return teachers, students

    def teacher_momentum(self) -> tf.Tensor:
        """The momentum of the optimizer step just applied (float64; see `cosine_momentum`)."""
        step = tf.cast(self.optimizer.iterations, tf.float64) - 1.0
        return cosine_momentum(tf.maximum(step, 0.0), self.schedule_steps[0], self.momentum)

    @property
    def steps_per_epoch(self) -> tf.Tensor:
        """Optimizer steps per epoch as `fit` last set them (0 when unknown; teacher methods)."""
        return self.schedule_steps[1]

    def embed(self, images, output: str = "backbone", batch_size: int = 256):
        """The representations of `images`: the student's, or the momentum teacher's.

        Args:
            images: A batch of images.
            output: `"backbone"` (default) or `"projector"`, the student's
                networks; `"teacher"` or `"teacher_projector"`, the momentum
                teacher's (DINO evaluates its teacher).
            batch_size: Batch size of the forward passes. Defaults to 256.

        Returns:
            A NumPy array `[batch, dim]`.

        Raises:
            ValueError: For an unknown `output`, or a teacher's output of a
                method without a teacher.
        """
        if output not in ("teacher", "teacher_projector"):
            return super().embed(images, output=output, batch_size=batch_size)
        if self.teacher_backbone is None:
            raise ValueError(
                f"output={output!r}: {self._method.display_name} has no momentum teacher. "
                "Use output='backbone' or 'projector'."
            )
        encoder = self.teacher_backbone
        if output == "teacher_projector":
            encoder = keras.Sequential([self.teacher_backbone, self.teacher_projector])
        return encoder.predict(images, batch_size=batch_size, verbose=0)

    def _set_schedule(self, x: Any, args: tuple, kwargs: dict) -> None:
        """Sets the momentum schedule's total and per-epoch optimizer steps from `fit`'s.

        `args` are `fit`'s positional arguments after `x`, in Keras' order:
        `(y, batch_size, epochs, ...)`.
        """
        epochs = _fit_argument(args, 2, kwargs, "epochs")
        epochs = 1 if epochs is None else epochs
        per_epoch = kwargs.get("steps_per_epoch")
        if per_epoch is None and isinstance(x, tf.data.Dataset):
            cardinality = int(x.cardinality())
            per_epoch = cardinality if cardinality > 0 else None
        elif per_epoch is None and hasattr(x, "shape"):  # Arrays, batched by Keras.
            batch_size = _fit_argument(args, 1, kwargs, "batch_size") or 32
            per_epoch = math.ceil(x.shape[0] / batch_size)
        if per_epoch is None and self.total_steps is None:
            raise ValueError(
                f"{self._method.display_name}'s momentum schedule needs the run's number of "
                "optimizer steps, and fit cannot tell it from this input (an infinite or "
                "unknown-length dataset). Pass steps_per_epoch=..., or total_steps=... to "
                "the model."
            )
        in_epochs = self._method.options_in_epochs(self.algorithm_options)
        if per_epoch is None and in_epochs:
            # total_steps fixes the momentum schedule, but these options count epochs: with
            # no epoch length they would silently turn off.
            raise ValueError(
                f"{self._method.display_name}'s algorithm_options "
                f"{', '.join(f'{k}={v!r}' for k, v in in_epochs.items())} count epochs of "
                "optimizer steps, and fit cannot tell an epoch's length from this input (an "
                "infinite or unknown-length dataset). Pass steps_per_epoch=... to fit, or set "
                "those options to 0."
            )
        total = self.total_steps or int(epochs) * int(per_epoch)
        self.schedule_steps.assign([total, per_epoch or 0])


def _fit_argument(args: tuple, position: int, kwargs: dict, name: str) -> Any:
    """`fit`'s argument `name`, at `position` of `args` (after `x`) or among `kwargs`."""
    if len(args) > position:
        return args[position]
    return kwargs.get(name)


def _trainable_indices(network: keras.Model) -> list[int]:
    """Positions in `network.weights` of its trainable weights (the clone's are at the same)."""
    trainable = {id(v) for v in network.trainable_weights}
    return [i for i, v in enumerate(network.weights) if id(v) in trainable]
