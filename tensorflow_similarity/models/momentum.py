"""Momentum teachers: the cosine schedule, the teacher's copy, updates on every replica.

A teacher-based method (BYOL, MoCo v3, DINO) keeps a copy of the student's
networks that the optimizer never touches; after each optimizer step it moves
towards the student, `teacher = m * teacher + (1 - m) * student`. Under
`tf.distribute` the update runs in cross-replica context, one per variable and
device from values that are identical on every replica, so every replica holds
the same teacher.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from tensorflow_similarity._validation import check_number

__all__ = ["assign_on_every_replica", "clone_network", "cosine_momentum"]


def cosine_momentum(step: Any, total_steps: Any, base: float) -> tf.Tensor:
    """The momentum of BYOL's cosine schedule at optimizer step `step` (0-based).

        m(k) = 1 - (1 - base) * (cos(pi * k / K) + 1) / 2

    It is `base` at the first step, rises to 1 at `k = K = total_steps` and
    stays there. With `total_steps <= 0` (unknown) it is `base` throughout.

    Args:
        step: The 0-based index of the optimizer step just applied.
        total_steps: The run's number of optimizer steps.
        base: The momentum of the first step, in [0, 1].

    Returns:
        A float32 scalar (float64 when `step` is float64).

    Raises:
        ValueError: If `base` is not in [0, 1].

    Example:

    >>> from tensorflow_similarity.models.momentum import cosine_momentum
    >>> [round(float(cosine_momentum(k, 10, 0.996)), 4) for k in (0, 5, 10, 20)]
    [0.996, 0.998, 1.0, 1.0]
    """
    base = check_momentum("base", base)
    dtype = step.dtype if isinstance(step, tf.Tensor) and step.dtype.is_floating else tf.float32
    step = tf.cast(step, dtype)
    total = tf.cast(total_steps, dtype)
    progress = tf.where(total > 0, tf.minimum(step, total) / tf.maximum(total, 1), 0.0)
    return 1.0 - (1.0 - base) * (tf.cos(math.pi * progress) + 1.0) / 2.0


def check_momentum(name: str, value: Any, owner: str | None = None) -> float:
    """Returns `value` as a float, or raises `ValueError` when it is not in [0, 1]."""
    value = check_number(name, value, owner=owner)
    if not 0.0 <= value <= 1.0:
        raise ValueError(
            f"{owner + ': ' if owner else ''}{name} must be in [0, 1] (the teacher keeps "
            f"that fraction of itself at each step), got {value}."
        )
    return value


def clone_network(network: keras.Model, name: str) -> keras.Model:
    """Returns a copy of `network` with its own variables, holding the same values.

    The copy has the same layers (a synchronised batch norm stays one), is
    built, and starts equal to `network`, as the papers start their teachers.

    Raises:
        ValueError: If Keras cannot rebuild `network` from its config (a
            subclassed model without `get_config`), naming it.
    """
    try:
        copy = keras.models.clone_model(network)
    except Exception as error:  # Keras raises several types for an unclonable model.
        raise ValueError(
            f"Cannot make the momentum teacher's copy of {network.name!r} "
            f"({type(network).__name__}): keras.models.clone_model failed with {error!r}. "
            "Give the model a get_config() (and register it), or build it functionally."
        ) from error
    if not copy.built and network.inputs:
        copy.build(tuple(network.inputs[0].shape))
    copy.set_weights(network.get_weights())
    copy.name = name
    return copy


def assign_on_every_replica(variables: Sequence[Any], values: Sequence[Any]) -> None:
    """Assigns `values[i]` to `variables[i]` on every replica, in cross-replica context.

    In a replica context the assignment goes through one `merge_call`, and
    each device's copy of a mirrored variable takes that device's value; the
    callers pass values that are identical on every replica (computed from
    mirrored variables and all-reduced statistics), so the copies stay equal.
    Outside a strategy it is a plain `assign`.

    Args:
        variables: Keras variables (mirrored under a strategy).
        values: Tensors of their shapes, one per variable.
    """
    tf_variables = [v.value if isinstance(v, keras.Variable) else v for v in variables]
    values = [tf.cast(value, v.dtype) for v, value in zip(tf_variables, values, strict=True)]
    ctx = tf.distribute.get_replica_context()
    if ctx is None:
        strategy = tf.distribute.get_strategy()
        _update(strategy, tf_variables, values)
        return
    ctx.merge_call(_update, args=(tf_variables, values))


def _update(strategy: tf.distribute.Strategy, variables: list, values: list) -> None:
    for variable, value in zip(variables, values, strict=True):
        strategy.extended.update(variable, _assign, args=(value,), group=False)


def _assign(variable: tf.Variable, value: tf.Tensor) -> Any:
    return variable.assign(value)
