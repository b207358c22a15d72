"""The one registry of self-supervised methods: name -> `ContrastiveAlgorithm`."""

from __future__ import annotations

from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm

_REGISTRY: dict[str, ContrastiveAlgorithm] = {}


def register_algorithm(
    cls: type[ContrastiveAlgorithm], *, replace: bool = False
) -> type[ContrastiveAlgorithm]:
    """Registers a method under `cls.name`, so models and the factory find it by name.

    Usable as a class decorator. A saved `ContrastiveModel` records the name
    only, so a model of a method registered outside the package loads in a
    process that registered it again.

    Args:
        cls: A `ContrastiveAlgorithm` subclass with a lower-case `name`.
        replace: Replace a method already registered under that name.
            Defaults to `False`.

    Returns:
        `cls`, unchanged.

    Raises:
        TypeError: If `cls` is not a `ContrastiveAlgorithm` subclass.
        ValueError: If its name is not a lower-case string, or is taken and
            `replace` is `False`.

    Example:

    >>> from tensorflow_similarity.losses import SimCLRLoss
    >>> from tensorflow_similarity.models.algorithms import (
    ...     SimCLR, get_algorithm, register_algorithm, unregister_algorithm)
    >>> @register_algorithm
    ... class ColdSimCLR(SimCLR):
    ...     name = "cold_simclr"
    ...     def default_loss(self):
    ...         return SimCLRLoss(temperature=0.05)
    >>> get_algorithm("cold_simclr").default_loss().temperature
    0.05
    >>> unregister_algorithm("cold_simclr")
    """
    if not (isinstance(cls, type) and issubclass(cls, ContrastiveAlgorithm)):
        raise TypeError(f"register_algorithm takes a ContrastiveAlgorithm subclass, got {cls!r}.")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name or name != name.lower():
        raise ValueError(
            f"{cls.__name__}.name must be a non-empty lower-case string, got {name!r}."
        )
    if name in _REGISTRY and not replace:
        raise ValueError(
            f"An algorithm named {name!r} is registered already "
            f"({type(_REGISTRY[name]).__name__}). Pick another name, or pass replace=True."
        )
    _REGISTRY[name] = cls()
    return cls


def unregister_algorithm(name: str) -> None:
    """Removes the method registered under `name`.

    Raises:
        ValueError: If no method has that name.
    """
    if name not in _REGISTRY:
        raise ValueError(f"No algorithm named {name!r} is registered.")
    del _REGISTRY[name]


def get_algorithm(name: str) -> ContrastiveAlgorithm:
    """Returns the method registered under `name` (any case).

    Raises:
        ValueError: For a name no method has, listing the registered ones.
    """
    if not isinstance(name, str) or name.lower() not in _REGISTRY:
        raise ValueError(f"Unknown algorithm {name!r}. Use one of {', '.join(_REGISTRY)}.")
    return _REGISTRY[name.lower()]


def algorithm_names() -> tuple[str, ...]:
    """The registered methods' names, in the order they were registered."""
    return tuple(_REGISTRY)
