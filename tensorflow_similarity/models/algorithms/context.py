"""What a self-supervised method may use of the model that trains it: `MethodContext`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity.models.shuffle_batch_norm import shuffle_across_replicas

__all__ = ["STATISTIC_RULES", "MethodContext"]

# How the training step combines a `Forward.statistics` entry over accumulated micro-batches.
STATISTIC_RULES = ("sum", "concat")


@dataclasses.dataclass(frozen=True)
class MethodContext:
    """The networks, options, step and state a method's hooks see; never the model itself.

    `ContrastiveModel` hands one to each hook of its `ContrastiveAlgorithm`
    (`create_state`, `forward`, `adjust_gradients`, `after_update`), so that
    a method depends on this interface alone. A method's own variables (DINO's
    centre, a queue of keys) are its state: `create_state` makes them with
    `add_state`, which creates them as variables of the model, saved in its
    `.keras` file under the model's name and the state's (DINO's centre:
    `contrastive_model/dino_center`), and restored exactly on loading.

    Attributes:
        backbone: The student's backbone.
        projector: The student's projector.
        predictor: The student's predictor, or `None`.
        teacher_backbone: The momentum teacher's backbone, or `None` for a
            method without a teacher.
        teacher_projector: The momentum teacher's projector, or `None`.
        concat_views: Whether `encode_views` runs both views as one batch.
        options: The method's `algorithm_options`, resolved.
        state: The method's variables by name, as `add_state` made them.
        optimizer: The model's optimizer, or `None` before `compile`; a
            method reads its step and its loss scale, the model applies it.
        steps_per_epoch: Optimizer steps per epoch as `fit` last set them (a
            scalar tensor; 0 when unknown or for a method without a teacher).
        teacher_momentum: Returns the momentum of the optimizer step just
            applied, or `None` without a teacher.
        teacher_pairs: Returns the teacher's weights and the student's they
            follow, in matching order, or `None` without a teacher.
        create_variable: Makes a variable of the model (`keras.Model.add_weight`'s
            arguments); `None` except in `create_state`.
        accumulation_steps: The model's micro-batches per optimizer step (a
            queue checks, while tracing, the keys a step enqueues).
        shuffle_seed: With shuffle batch norm (`bn="shuffle"`), the seed of
            the key encoder's permutations (see `encode_keys`); `None`
            otherwise.
    """

    backbone: keras.Model
    projector: keras.Model
    predictor: keras.Model | None = None
    teacher_backbone: keras.Model | None = None
    teacher_projector: keras.Model | None = None
    concat_views: bool = False
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    state: dict[str, keras.Variable] = dataclasses.field(default_factory=dict)
    optimizer: keras.optimizers.Optimizer | None = None
    steps_per_epoch: Any = 0
    teacher_momentum: Callable[[], tf.Tensor] | None = None
    teacher_pairs: Callable[[], tuple[list, list]] | None = None
    create_variable: Callable[..., keras.Variable] | None = None
    accumulation_steps: int = 1
    shuffle_seed: int | None = None

    @property
    def step(self) -> Any:
        """The optimizer's step count (`iterations`), or 0 before `compile`."""
        return self.optimizer.iterations if self.optimizer is not None else 0

    def encode_views(self, view1: Any, view2: Any, network: keras.Model, training: bool) -> tuple:
        """Runs `network` on both views: as one batch with `concat_views`, else one call each."""
        if self.concat_views:
            both = network(tf.concat([view1, view2], axis=0), training=training)
            return tuple(tf.split(both, 2, axis=0))
        return network(view1, training=training), network(view2, training=training)

    def encode_keys(self, network: Callable[..., tuple], *views: Any, training: bool) -> tuple:
        """Runs the key (teacher) encoder `network` on `views`, shuffled across replicas if set.

        With shuffle batch norm (`shuffle_seed` set) and in training, the
        views' global batch is permuted across the replicas before `network`
        runs and its outputs are restored to the original order after (see
        `models.shuffle_batch_norm.shuffle_across_replicas`; the permutation
        is drawn from the optimizer's `step` and `shuffle_seed`); otherwise
        it is `network(*views)`. A method whose key encoder goes through here
        sets `has_key_encoder`, which allows `bn="shuffle"`.

        Args:
            network: Takes the views and returns a tuple of outputs, row for row.
            *views: This replica's rows of each view.
            training: Whether the networks run in training mode; in inference
                batch norm uses its moving statistics and nothing is shuffled.

        Returns:
            `network`'s outputs for this replica's rows.
        """
        if self.shuffle_seed is None or not training:
            return tuple(network(*views))
        return shuffle_across_replicas(network, views, self.step, self.shuffle_seed)

    def add_state(
        self, name: str, shape: tuple, dtype: Any = None, initializer: Any = "zeros"
    ) -> keras.Variable:
        """Creates the method's variable `name` (not trainable), kept in `state` and saved.

        Args:
            name: The state's name, also the variable's (its saved path is
                the model's name, then `name`).
            shape: The variable's shape.
            dtype: Its dtype; `None` (default) for the model's.
            initializer: A Keras initializer or its name. Defaults to `"zeros"`.

        Returns:
            The variable.

        Raises:
            RuntimeError: Outside `create_state`, where the model can add no variable.
            ValueError: If the method has a state of that name already.
        """
        if self.create_variable is None:
            raise RuntimeError(
                f"add_state({name!r}): a method creates its state in create_state, before "
                "the model is built; the model can add no variable afterwards."
            )
        if name in self.state:
            raise ValueError(f"The method has a state named {name!r} already; pick another name.")
        variable = self.create_variable(
            name=name, shape=shape, dtype=dtype, initializer=initializer, trainable=False
        )
        self.state[name] = variable
        return variable
