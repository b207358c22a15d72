"""`ContrastiveModel`'s arguments: checked before anything is built, and serialised."""

from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import keras

from tensorflow_similarity._validation import check_int
from tensorflow_similarity.distribute.plugin import SyncBatchNormPlugin, resolve_sync_bn
from tensorflow_similarity.models.algorithms import (
    ContrastiveAlgorithm,
    algorithm_names,
    get_algorithm,
)
from tensorflow_similarity.models.momentum import check_momentum
from tensorflow_similarity.models.shuffle_batch_norm import BN_MODES

__all__ = [
    "ContrastiveArguments",
    "check_contrastive_arguments",
    "check_shuffle_replicas",
    "resolve_batch_norm",
    "serialize_augmenter",
]


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


def resolve_batch_norm(
    bn: Any, sync_bn: Any, method: ContrastiveAlgorithm
) -> tuple[str, SyncBatchNormPlugin | None]:
    """Resolves the two spellings of the batch-norm mode, `bn=` and `sync_bn=`, into one.

    `sync_bn=True` (or a plugin) is `bn="sync"`, `sync_bn=False` is
    `bn="per_replica"` or `"shuffle"`, and `None` (either) leaves the choice
    to the other; both `None` is `"per_replica"`, as before `bn` existed.

    Args:
        bn: `None`, `"per_replica"`, `"sync"` or `"shuffle"`.
        sync_bn: `None`, `False`, `True` or a `SyncBatchNormPlugin`.
        method: The model's algorithm, for `"shuffle"`.

    Returns:
        `(mode, plugin)`: one of `BN_MODES`, and the sync plugin (`None`
        unless the mode is `"sync"`).

    Raises:
        ValueError: For an unknown `bn`, values that contradict each other,
            or `"shuffle"` for a method without a key encoder.
        TypeError: For a bad `sync_bn`.
    """
    if bn is not None and bn not in BN_MODES:
        raise ValueError(f"bn={bn!r}: use one of {', '.join(map(repr, BN_MODES))}, or None.")
    plugin = resolve_sync_bn(False if sync_bn is None else sync_bn)
    if bn is None:
        return ("sync" if plugin is not None else "per_replica"), plugin
    if sync_bn is not None and (plugin is not None) != (bn == "sync"):
        raise ValueError(
            f"bn={bn!r} and sync_bn={sync_bn!r} contradict each other: sync_bn=True (or a "
            "plugin) means bn='sync', sync_bn=False means bn='per_replica' or 'shuffle'. Give "
            "one of the two."
        )
    if bn == "sync" and plugin is None:
        plugin = resolve_sync_bn(True)
    if bn == "shuffle" and not method.has_key_encoder:
        able = [n for n in algorithm_names() if get_algorithm(n).has_key_encoder]
        raise ValueError(
            f"bn='shuffle' shuffles a key encoder's batch across replicas, and "
            f"{method.display_name} has none (its has_key_encoder is False). Use bn='sync' or "
            f"'per_replica', or a method with a key encoder: {', '.join(able) or 'none'}."
        )
    return bn, plugin


def check_shuffle_replicas(num_replicas: int, model_name: str) -> None:
    """Refuses shuffle batch norm on one replica, where it would change nothing.

    Args:
        num_replicas: The replicas `fit` trains on.
        model_name: The model's name, for the message.

    Raises:
        ValueError: When `num_replicas` is 1.
    """
    if num_replicas == 1:
        raise ValueError(
            f"ContrastiveModel {model_name!r} has bn='shuffle', and fit runs on one replica: "
            "permuting one device's batch leaves every batch statistic as it was, so it would "
            "train exactly as bn='per_replica' and fix no leak. Train under a strategy with 2 "
            "or more replicas, or build the model with bn='per_replica'."
        )


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
