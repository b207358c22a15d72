"""Compares one of 0.17.1's recorded signatures (`signatures_017.json`) with ours.

`deviations(entry)` imports our object at 0.17's module path, or from that
module's package (or a parent package), and returns the differences a 0.17
caller could meet, each a short code:

- `"missing"`: no such name at either place (or, for a method, on the class);
- `"not-callable"`: ours is not a function or class (a method made a property);
- `"position:NAME"`: 0.17's positional parameter `NAME` is ours too, but not
  at the same position (or keyword-only): a positional 0.17 call binds its
  value to another parameter, or fails;
- `"param:NAME"`: 0.17's parameter `NAME` is not one of ours by name (a
  keyword call fails, or is swallowed by `**kwargs`);
- `"kind:NAME"`: ours cannot be passed the way 0.17's could (positional-only
  where 0.17 took a keyword);
- `"default:NAME"`: 0.17's default differs from ours, or ours has none (a
  default of ours of `None` that the constructor resolves to 0.17's value,
  read back from a default-built instance, is 0.17's);
- `"required:NAME"`: a parameter of ours 0.17 lacked has no default;
- `"*args"` / `"**kwargs"`: 0.17 accepted extra positional / keyword
  arguments and ours does not.

Defaults that 0.17 wrote as expressions are compared through
`EXPRESSION_DEFAULTS`: our default must be one of the listed values.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import math
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).with_name("signatures_017.json")

POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)

# 0.17's defaults written as expressions, and what ours may be instead.
EXPRESSION_DEFAULTS: dict[str, tuple[Any, ...]] = {
    # Keras 3 has no Reduction enum; "auto" is kept as a name for sum_over_batch_size.
    "tf.keras.losses.Reduction.AUTO": ("auto", "sum_over_batch_size"),
    "tf.keras.losses.Reduction.NONE": ("none",),
    "math.inf": (math.inf,),
    "tf.data.AUTOTUNE": (-1,),
    # Evaluated when the function is defined in 0.17: the machine's count, or None.
    "os.cpu_count()": (None,),
    # The identity: ours spells "no loading" None.
    "lambda q: q": (None,),
}


def load_entries() -> list[dict[str, Any]]:
    return json.loads(TABLE_PATH.read_text())["entries"]


def entry_id(entry: dict[str, Any]) -> str:
    return f"{entry['module']}.{entry['qualname']}"


def find_object(entry: dict[str, Any]) -> Any:
    """Our object for `entry`, at 0.17's module path or a package above it; `None` if absent."""
    head, *rest = entry["qualname"].split(".")
    parts = entry["module"].split(".")
    for end in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        found = getattr(module, head, None)
        if found is None or inspect.ismodule(found):
            continue
        for name in rest:
            found = inspect.getattr_static(found, name, None)
            if found is None:
                break
        if found is not None:
            return found
    return None


def our_parameters(entry: dict[str, Any], found: Any) -> list[inspect.Parameter]:
    """Our parameters, `self` / `cls` dropped as the table drops them."""
    kind = entry["kind"]
    if kind == "class":
        return list(inspect.signature(found.__init__).parameters.values())[1:]
    if isinstance(found, staticmethod):
        return list(inspect.signature(found.__func__).parameters.values())
    if isinstance(found, classmethod):
        return list(inspect.signature(found.__func__).parameters.values())[1:]
    parameters = list(inspect.signature(found).parameters.values())
    return parameters[1:] if kind in ("method", "classmethod") else parameters


def same_default(recorded: dict[str, Any], ours: Any) -> bool:
    if not recorded["literal"]:
        allowed = EXPRESSION_DEFAULTS.get(recorded["repr"])
        if allowed is not None:
            return any(_same_value(value, ours) for value in allowed)
        # A function named as the default (0.17's `load_example_fn=load_image`).
        return getattr(ours, "__name__", None) == recorded["repr"].split(".")[-1]
    return _same_value(ast.literal_eval(recorded["repr"]), ours)


def _same_value(theirs: Any, ours: Any) -> bool:
    """Equal values: lists and tuples alike (a mutable default made a tuple), ints and
    floats alike (`25` and `25.0`), bools apart from numbers, NaN equal to NaN."""
    if isinstance(theirs, (list, tuple)) and isinstance(ours, (list, tuple)):
        return len(theirs) == len(ours) and all(map(_same_value, theirs, ours))
    if isinstance(theirs, bool) or isinstance(ours, bool):
        return type(theirs) is type(ours) and theirs == ours
    numbers = (int, float)
    if isinstance(theirs, numbers) and isinstance(ours, numbers):
        return theirs == ours or (math.isnan(theirs) and math.isnan(ours))
    if type(theirs) is not type(ours):
        return False
    try:
        return bool(theirs == ours)
    except ValueError:  # an array compared element-wise
        return False


def compare(
    recorded: list[dict[str, Any]], ours: list[inspect.Parameter], found: Any = None
) -> list[str]:
    """The deviations of our parameters `ours` from 0.17's `recorded` ones (see module doc).

    `found`, our class when the entry is one, lets a default of `None` that
    the constructor resolves to 0.17's value count as 0.17's
    (`F1Score(name=None).name == "f1"`).
    """
    deviations: list[str] = []
    by_name = {p.name: p for p in ours if p.kind not in VARIADIC}
    positional_kinds = {k.name for k in POSITIONAL}
    theirs_positional = [r["name"] for r in recorded if r["kind"] in positional_kinds]
    ours_positional = [p.name for p in ours if p.kind in POSITIONAL]
    for position, name in enumerate(theirs_positional):
        if name in by_name and ours_positional[position : position + 1] != [name]:
            deviations.append(f"position:{name}")
    for record in recorded:
        name, kind = record["name"], record["kind"]
        if kind == "VAR_POSITIONAL":
            if not any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in ours):
                deviations.append("*args")
            continue
        if kind == "VAR_KEYWORD":
            if not any(p.kind == inspect.Parameter.VAR_KEYWORD for p in ours):
                deviations.append("**kwargs")
            continue
        parameter = by_name.get(name)
        if parameter is None:
            deviations.append(f"param:{name}")
            continue
        if kind != "POSITIONAL_ONLY" and parameter.kind == inspect.Parameter.POSITIONAL_ONLY:
            deviations.append(f"kind:{name}")
        if record["default"] is not None and not _default_kept(record, parameter, found):
            deviations.append(f"default:{name}")
    known = {r["name"] for r in recorded}
    for parameter in ours:
        if (
            parameter.name not in known
            and parameter.kind not in VARIADIC
            and parameter.default is inspect.Parameter.empty
        ):
            deviations.append(f"required:{parameter.name}")
    return deviations


def _default_kept(record: dict[str, Any], parameter: inspect.Parameter, found: Any) -> bool:
    if parameter.default is inspect.Parameter.empty:
        return False
    if same_default(record["default"], parameter.default):
        return True
    if parameter.default is not None or found is None or not record["default"]["literal"]:
        return False
    # `None` resolved by the constructor: build one with the defaults and read it back
    # (a retrieval metric keeps 0.17's `name` as `_name`, its `name` adding `@k`).
    try:
        instance = found()
    except Exception:  # noqa: BLE001 (abstract, or arguments required)
        return False
    wanted = ast.literal_eval(record["default"]["repr"])
    name = record["name"]
    return any(
        hasattr(instance, attribute) and _same_value(wanted, getattr(instance, attribute))
        for attribute in (f"_{name}", name)
    )


def deviations(entry: dict[str, Any]) -> list[str]:
    """The differences between 0.17's `entry` and our object (see the module docstring)."""
    found = find_object(entry)
    if found is None:
        return ["missing"]
    if entry["parameters"] is None:
        return []
    function = found.__func__ if isinstance(found, (staticmethod, classmethod)) else found
    if not callable(function):
        return ["not-callable"]
    owner = found if entry["kind"] == "class" else None
    return compare(entry["parameters"], our_parameters(entry, found), owner)
