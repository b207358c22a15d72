"""Argument checks shared by the whole package, raised before any work starts.

Each checker names the owner (the class or function the user called), the
argument and the value received, so that a message says what was wrong; a
`hint` adds what to do instead. `is_int` and `is_real` are the predicates
behind them, for callers whose message needs more context than a checker's.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any


def is_int(value: Any) -> bool:
    """Whether `value` is an integer (Python or NumPy), `bool` excluded."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """Whether `value` is a real number (Python or NumPy), `bool` excluded."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _prefix(owner: str | None) -> str:
    return f"{owner}: " if owner else ""


def _suffix(hint: str) -> str:
    return f" {hint}" if hint else ""


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    allow_none: bool = False,
    owner: str | None = None,
    hint: str = "",
) -> int | None:
    """Returns `value` as an `int`, or raises naming the argument.

    Args:
        name: The argument's name.
        value: The value received.
        minimum: The smallest value accepted, or `None` for any.
        allow_none: Whether `None` is accepted (and returned).
        owner: The class or function the user called, for the message.
        hint: What to do instead, appended to the message.

    Returns:
        `int(value)`, or `None` when `allow_none` and `value is None`.

    Raises:
        ValueError: If `value` is not an integer of at least `minimum`.
    """
    if value is None and allow_none:
        return None
    if not is_int(value) or (minimum is not None and value < minimum):
        if minimum == 1:
            wanted = "a positive integer"
        elif minimum == 0:
            wanted = "a non-negative integer"
        elif minimum is not None:
            wanted = f"an integer >= {minimum}"
        else:
            wanted = "an integer"
        if allow_none:
            wanted = f"None or {wanted}"
        raise ValueError(
            f"{_prefix(owner)}{name} must be {wanted}. Received: {name}={value!r}.{_suffix(hint)}"
        )
    return int(value)


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    positive: bool = False,
    finite: bool = True,
    owner: str | None = None,
    hint: str = "",
) -> float:
    """Returns `value` as a `float`, or raises naming the argument and its range.

    Args:
        name: The argument's name.
        value: The value received.
        low: The smallest value accepted (inclusive), or `None`.
        high: The largest value accepted (inclusive), or `None`.
        positive: Whether only values `> 0` are accepted.
        finite: Whether infinities and NaN are rejected (NaN always is).
        owner: The class or function the user called, for the message.
        hint: What to do instead, appended to the message.

    Returns:
        `float(value)`.

    Raises:
        ValueError: If `value` is not a real number in range.
    """
    ok = is_real(value) and not math.isnan(value) and (math.isfinite(value) or not finite)
    ok = ok and not (positive and value <= 0)
    ok = ok and (low is None or value >= low) and (high is None or value <= high)
    if not ok:
        kind = "a finite number" if finite else "a number"
        if low is not None and high is not None:
            bound = f" in [{low}, {high}]"
        elif positive:
            bound = " > 0"
        elif low is not None:
            bound = f" >= {low}"
        elif high is not None:
            bound = f" <= {high}"
        else:
            bound = ""
        raise ValueError(
            f"{_prefix(owner)}{name} must be {kind}{bound}. "
            f"Received: {name}={value!r}.{_suffix(hint)}"
        )
    return float(value)


def check_bool(name: str, value: Any, *, owner: str | None = None, hint: str = "") -> bool:
    """Returns `value` if it is `True` or `False`, else raises a `TypeError` naming it.

    Args:
        name: The argument's name.
        value: The value received.
        owner: The class or function the user called, for the message.
        hint: What each value means, appended to the message.

    Returns:
        `value`.

    Raises:
        TypeError: If `value` is not a `bool`.
    """
    if not isinstance(value, bool):
        raise TypeError(
            f"{_prefix(owner)}{name} must be True or False. Received: {value!r} of type "
            f"{type(value).__name__}.{_suffix(hint)}"
        )
    return value


def check_choice(
    name: str,
    value: Any,
    choices: Sequence[Any],
    *,
    owner: str | None = None,
    hint: str = "",
) -> Any:
    """Returns `value` if it is one of `choices`, else raises listing them.

    Args:
        name: The argument's name.
        value: The value received.
        choices: The accepted values.
        owner: The class or function the user called, for the message.
        hint: What the choices mean, appended to the message.

    Returns:
        `value`.

    Raises:
        ValueError: If `value` is not in `choices`.
    """
    if value not in choices:
        raise ValueError(
            f"{_prefix(owner)}{name} must be one of {tuple(choices)}.{_suffix(hint)} "
            f"Received: {name}={value!r}"
        )
    return value


def check_pair(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    owner: str | None = None,
) -> tuple[float, float]:
    """Returns a `(min, max)` pair of numbers in range, or raises naming the argument.

    Args:
        name: The argument's name.
        value: The value received, a sequence of two numbers.
        low: The smallest value accepted for each, or `None`.
        high: The largest value accepted for each, or `None`.
        owner: The class or function the user called, for the message.

    Returns:
        The pair as floats.

    Raises:
        ValueError: If `value` is not two numbers in range with `min <= max`.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise ValueError(
            f"{_prefix(owner)}{name} must be a pair (min, max). Received: {name}={value!r}"
        )
    first = check_number(name, value[0], low=low, high=high, owner=owner)
    second = check_number(name, value[1], low=low, high=high, owner=owner)
    if first > second:
        raise ValueError(
            f"{_prefix(owner)}{name} must be (min, max) with min <= max. Received: {name}={value!r}"
        )
    return first, second
