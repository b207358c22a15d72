"""The one registry of self-supervised methods: name -> `ContrastiveAlgorithm`.

Methods register themselves when their module is imported; an installed
package declares its methods under the entry-point group
`ENTRY_POINT_GROUP`, and `load_entry_points` (which `tfsim` calls when it
builds its parser) imports them.
"""

from __future__ import annotations

import importlib.metadata
import warnings

from tensorflow_similarity.models.algorithms.base import ContrastiveAlgorithm

# The entry-point group under which an installed package declares its methods.
ENTRY_POINT_GROUP = "tensorflow_similarity.algorithms"

_REGISTRY: dict[str, ContrastiveAlgorithm] = {}
# The entry points loaded (or found broken) already, as `(name, value)`: loaded once a process.
_LOADED_ENTRY_POINTS: set[tuple[str, str]] = set()


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


def load_entry_points() -> tuple[str, ...]:
    """Imports the methods installed packages declare under `ENTRY_POINT_GROUP`.

    An entry point names a module that registers its methods when imported
    (`my_package.swav`), or a `ContrastiveAlgorithm` subclass
    (`my_package.swav:SwAV`), which is registered if its module did not
    register it. In `pyproject.toml`:

    ```toml
    [project.entry-points."tensorflow_similarity.algorithms"]
    swav = "my_package.swav:SwAV"
    ```

    Each entry point is loaded once a process; calling again loads only new
    ones. An entry point that fails to import, names something else, or
    takes a name registered by another class is skipped with a
    `RuntimeWarning` naming it and the error: one broken package does not
    stop the others, nor the command line.

    Returns:
        The names of the entry points loaded by this call.
    """
    loaded = []
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        key = (entry_point.name, entry_point.value)
        if key in _LOADED_ENTRY_POINTS:
            continue
        _LOADED_ENTRY_POINTS.add(key)
        try:
            target = entry_point.load()
            if isinstance(target, type):
                if not issubclass(target, ContrastiveAlgorithm):
                    raise TypeError(f"{target!r} is not a ContrastiveAlgorithm subclass")
                if type(_REGISTRY.get(getattr(target, "name", None))) is not target:
                    register_algorithm(target)
        except Exception as error:  # A broken plug-in must not stop the others: named, skipped.
            warnings.warn(
                f"The {ENTRY_POINT_GROUP} entry point {entry_point.name!r} "
                f"({entry_point.value}) could not be loaded and is skipped: "
                f"{type(error).__name__}: {error}",
                RuntimeWarning,
                stacklevel=2,
            )
            continue
        loaded.append(entry_point.name)
    return tuple(loaded)
