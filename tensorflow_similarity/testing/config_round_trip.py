"""A configuration round trip, as Keras' `run_layer_test` makes one: `from_config(get_config())`.

Testing tooling (the package itself never imports it). A layer, loss, model or
augmenter rebuilt from its configuration must hold the same settings and, on
the same input, compute the same result; an incomplete `get_config` rebuilds
an object with default settings, which this check names.
"""

from __future__ import annotations

import copy as copying
import functools
from typing import Any

import keras
import numpy as np
import tensorflow as tf

_PLAIN = (bool, int, float, str, bytes, type(None), np.generic)
_MAX_DEPTH = 4
# A sub-layer's settings are its own round trip's; an initializer without a seed draws a new
# one for each instance, as Keras intends, and its config (compared) says so.
_OWN_ROUND_TRIP = (
    keras.layers.Layer,
    keras.initializers.Initializer,
    keras.regularizers.Regularizer,
    keras.constraints.Constraint,
)


def assert_config_round_trip(obj: Any, *args: Any, **kwargs: Any) -> Any:
    """Fails unless `type(obj).from_config(obj.get_config())` is an equal object.

    Three checks, in order: the copy's `get_config()` equals `obj`'s; (a
    built layer's copy built from its build config, as Keras loads it) every
    setting the two hold as attributes (numbers, strings, booleans, `None`
    and containers of them, recursively in attributes that have a
    `get_config`, such as a wrapped loss or a distance) is equal, which
    catches a setting `get_config` leaves out; and, when call arguments are
    given, the two compute the same result. For that, each object is called
    once (building its weights, advancing an augmenter's generator), the
    copy's weights are set to `obj`'s values, and the second calls must
    agree exactly. An augmenter needs a `seed` (or a `step=` argument) for
    its views to be comparable.

    Args:
        obj: A Keras layer, model or loss, or any object with `get_config`
            and a `from_config` class method (an augmenter).
        *args: Positional arguments of a call: a layer's or model's inputs,
            a loss's `y_true, y_pred`, an augmenter's images. None: only the
            configuration and the settings are compared.
        **kwargs: Keyword arguments of the call (`training=True`, `step=0`).

    Returns:
        The copy rebuilt from the configuration.

    Raises:
        AssertionError: Naming the configuration keys, settings or results
            that differ.
        TypeError: When `obj` has no `get_config`, raised before anything is
            rebuilt.

    Example:

    ```python
    import numpy as np
    from tensorflow_similarity.layers import MetricEmbedding
    from tensorflow_similarity.testing import assert_config_round_trip

    layer = MetricEmbedding(4)
    assert_config_round_trip(layer, np.ones((2, 3), "float32"))
    ```
    """
    if not callable(getattr(obj, "get_config", None)):
        raise TypeError(
            f"assert_config_round_trip needs an object with get_config() and a from_config "
            f"class method; received a {type(obj).__name__}."
        )
    name = type(obj).__name__
    config = obj.get_config()
    # from_config may consume its argument (a functional model's does).
    copy = type(obj).from_config(copying.deepcopy(config))
    _assert_equal(copy.get_config(), config, f"{name}.from_config(config).get_config()")
    build_config = getattr(obj, "get_build_config", lambda: None)()
    if getattr(obj, "built", False) and not copy.built and build_config:
        # Settings made in build() (reduction axes) are compared as Keras restores them.
        copy.build_from_config(build_config)
    differences = _differences(_settings(copy), _settings(obj))
    if differences:
        raise AssertionError(
            f"{name} rebuilt from its config holds other settings: "
            + "; ".join(differences)
            + ". get_config() must return every constructor argument, and __init__ must "
            "use each."
        )
    if args or kwargs:
        _assert_same_results(obj, copy, args, kwargs, name)
    return copy


def _assert_same_results(obj, copy, args, kwargs, name):
    obj(*args, **kwargs)
    copy(*args, **kwargs)
    mine, theirs = _weights(copy), _weights(obj)
    if len(mine) != len(theirs):
        raise AssertionError(
            f"{name} rebuilt from its config has {len(mine)} weights after a call, and the "
            f"original {len(theirs)}."
        )
    for variable, value in zip(mine, theirs, strict=True):
        variable.assign(np.asarray(value))
    expected, got = obj(*args, **kwargs), copy(*args, **kwargs)
    _assert_equal(_numpy(got), _numpy(expected), f"{name} rebuilt from its config, called")


def _weights(obj: Any) -> list[Any]:
    weights = getattr(obj, "weights", None)
    if weights is not None:
        return list(weights)
    return [v for v in vars(obj).values() if isinstance(v, tf.Variable)]


def _numpy(result: Any) -> Any:
    return tf.nest.map_structure(
        lambda t: t.numpy() if hasattr(t, "numpy") else np.asarray(t), result
    )


def _settings(obj: Any, depth: int = 0) -> dict[str, Any]:
    """The plain-valued attributes of `obj`, and of those of its parts that have a config."""
    settings: dict[str, Any] = {}
    for key, value in sorted(vars(obj).items()):
        if key in _keras_bookkeeping() or key.startswith("_self_"):
            continue  # Keras' and TensorFlow's tracking state
        if _is_plain(value):
            settings[key] = value
        elif depth < _MAX_DEPTH and callable(getattr(value, "get_config", None)):
            if isinstance(value, _OWN_ROUND_TRIP):
                continue
            settings[key] = (type(value).__name__, _settings(value, depth + 1))
    return settings


@functools.cache
def _keras_bookkeeping() -> frozenset[str]:
    """The attributes Keras' base classes set on every layer and loss: state, not settings."""
    names: set[str] = set()
    for base in (keras.layers.Layer(), keras.losses.Loss()):
        names.update(vars(base))
    return frozenset(names - {"name"})


def _is_plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return isinstance(value, _PLAIN)


def _differences(got: dict, expected: dict, prefix: str = "") -> list[str]:
    found = []
    for key in sorted(set(got) | set(expected), key=str):
        mine, theirs = got.get(key, "<missing>"), expected.get(key, "<missing>")
        if isinstance(mine, tuple) and isinstance(theirs, tuple) and _nested(mine, theirs):
            if mine[0] != theirs[0]:
                found.append(f"{prefix}{key} is a {mine[0]}, not a {theirs[0]}")
            else:
                found.extend(_differences(mine[1], theirs[1], f"{prefix}{key}."))
        elif not _equal(mine, theirs):
            found.append(f"{prefix}{key}={mine!r}, not {theirs!r}")
    return found


def _nested(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) == 2 and isinstance(a[1], dict) and isinstance(b[1], dict)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.shape(a) == np.shape(b) and bool(np.all(np.asarray(a) == np.asarray(b)))
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return bool(a == b)


def _assert_equal(got: Any, expected: Any, what: str) -> None:
    if isinstance(got, dict) and isinstance(expected, dict):
        differing = [
            key
            for key in sorted(set(got) | set(expected), key=str)
            if key not in got or key not in expected or not _equal(got[key], expected[key])
        ]
        if differing:
            details = ", ".join(
                f"{k}: {got.get(k, '<missing>')!r} != {expected.get(k, '<missing>')!r}"
                for k in differing
            )
            raise AssertionError(f"{what} differs in {details}.")
        return
    flat_got, flat_expected = tf.nest.flatten(got), tf.nest.flatten(expected)
    if len(flat_got) != len(flat_expected):
        raise AssertionError(f"{what} returns {len(flat_got)} values, not {len(flat_expected)}.")
    for index, (a, b) in enumerate(zip(flat_got, flat_expected, strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"{what}: value {index} differs")
