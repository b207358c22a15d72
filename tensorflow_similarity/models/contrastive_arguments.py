"""`ContrastiveModel`'s arguments: checked before anything is built, and serialised."""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import keras

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.models.algorithms import ContrastiveAlgorithm, get_algorithm
from tensorflow_similarity.models.momentum import check_momentum

__all__ = ["ContrastiveArguments", "check_contrastive_arguments", "serialize_augmenter"]


class ContrastiveArguments(NamedTuple):
    """The checked arguments: the method, and the values the model keeps."""

    method: ContrastiveAlgorithm
    accumulation_steps: int
    momentum: float | None
    total_steps: int | None
    options: dict[str, Any]


def check_contrastive_arguments(
    algorithm: str,
    backbone: Any,
    projector: Any,
    predictor: Any,
    augmenter: Any,
    accumulation_steps: Any,
    momentum: Any,
    total_steps: Any,
    algorithm_options: dict[str, Any] | None,
) -> ContrastiveArguments:
    """Checks `ContrastiveModel`'s arguments (see its docstring for each) and resolves them.

    Returns:
        A `ContrastiveArguments`: the method, the accumulation steps, the
        teacher's base momentum (`None` without a teacher), the total steps
        and the method's options with their defaults.

    Raises:
        ValueError: As `ContrastiveModel` documents.
        TypeError: As `ContrastiveModel` documents.
    """
    method = get_algorithm(algorithm)
    accumulation_steps = check_int("accumulation_steps", accumulation_steps, minimum=1)
    if total_steps is not None:
        total_steps = check_int("total_steps", total_steps, minimum=1)
    options = method.resolve_options(algorithm_options)
    momentum = _teacher_momentum(method, momentum, backbone)
    for name, sub_model in (("backbone", backbone), ("projector", projector)):
        if not isinstance(sub_model, keras.Model):
            raise TypeError(f"{name} must be a keras.Model, got {type(sub_model).__name__}.")
    if predictor is not None and not isinstance(predictor, keras.Model):
        raise TypeError(f"predictor must be a keras.Model or None, got {type(predictor).__name__}.")
    method.check_heads(projector, predictor)
    if augmenter is not None and not callable(augmenter):
        raise TypeError("augmenter must be callable: images -> (view1, view2).")
    return ContrastiveArguments(method, accumulation_steps, momentum, total_steps, options)


def _teacher_momentum(method: ContrastiveAlgorithm, momentum: Any, backbone: Any) -> float | None:
    """Checks `momentum` against the method; returns the teacher's base momentum or `None`."""
    if not method.has_teacher:
        if momentum is not None:
            raise ValueError(
                f"momentum={momentum!r} is a teacher's, and {method.display_name} has no "
                "momentum teacher. Drop momentum=..., or use byol, mocov3 or dino."
            )
        return None
    if isinstance(backbone, keras.Model) and not backbone.trainable_weights:
        raise ValueError(
            f"{method.display_name} trains a student that its momentum teacher follows, "
            f"but the backbone {backbone.name!r} has no trainable weights (frozen?): the "
            "teacher would never move. Set backbone.trainable = True."
        )
    return check_momentum(
        "momentum", method.base_momentum if momentum is None else momentum, "ContrastiveModel"
    )


def serialize_augmenter(augmenter: Any, model_name: str) -> dict[str, Any] | None:
    """The augmenter's config for the model's; `None`, with a warning, if it has none.

    Args:
        augmenter: The model's augmenter, or `None`.
        model_name: The model's name, for the warning.

    Returns:
        The serialised augmenter, or `None` when there is none or it has no
        `get_config` (a `UserWarning` then says how to set it after loading).
    """
    if augmenter is None:
        return None
    if callable(getattr(augmenter, "get_config", None)):
        return keras.saving.serialize_keras_object(augmenter)
    warnings.warn(
        f"ContrastiveModel {model_name!r}: the augmenter {augmenter!r} has no "
        "get_config(), so the saved model does not keep it. After loading, set "
        "model.augmenter again, or use a serialisable augmenter such as "
        "tensorflow_similarity.augmenters.ViewAugmenter.",
        UserWarning,
        stacklevel=3,
    )
    return None
