"""One device against K replicas: the parity check of a loss over the global batch.

Testing tooling (the package itself never imports it). `replica_parity`
computes a loss and its gradients once on one device holding the whole batch
and once under a `MirroredStrategy` of `K` replicas holding unequal, different
parts of it, and returns how far apart they are; `assert_replica_parity`
fails a test when they differ. Run it in float64 to see exactness (~1e-12).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity.testing.config_round_trip import assert_config_round_trip
from tensorflow_similarity.testing.replicas import mirrored_strategy, run_on_replicas


class Parity(NamedTuple):
    """How far `K` replicas are from one device.

    Attributes:
        replicas: The number of replicas `K`.
        sizes: The rows each replica held.
        value_error: Largest absolute difference between the replicas'
            values added up (concatenated for `reduction="none"`) and the
            one-device value.
        gradient_error: Largest absolute difference between the gradients
            with respect to the inputs, each replica's rows concatenated,
            and to the loss's trainable weights (a proxy loss's proxies),
            summed over the replicas as the strategy sums them, and the
            one-device gradients.
        scale: Largest absolute one-device value or gradient, for relative
            tolerances.
    """

    replicas: int
    sizes: tuple[int, ...]
    value_error: float
    gradient_error: float
    scale: float


def uneven_sizes(batch: int, replicas: int) -> tuple[int, ...]:
    """Returns `replicas` unequal part sizes adding up to `batch`, growing with the replica id.

    Replica `i` gets about `(i + 1) / (1 + 2 + ... + K)` of the rows, so the
    parts differ in size, and the first are empty when `batch` is small.
    """
    weights = np.cumsum(np.arange(1, replicas + 1))
    cuts = np.floor(batch * weights / weights[-1]).astype(int)
    return tuple(int(s) for s in np.diff(np.concatenate([[0], cuts])))


def replica_parity(
    loss: keras.losses.Loss,
    y_true: Any,
    y_pred: Any,
    replicas: Sequence[int] = (2, 4, 8),
) -> list[Parity]:
    """Compares a loss on one device with the same loss on `K` replicas.

    The batch's rows are split into unequal consecutive parts
    (`uneven_sizes`), one per replica, so each replica holds different data.
    `loss` is first checked to rebuild from its config as an equal object
    (`assert_config_round_trip`: the same config and settings), so that the
    copies run are the loss given, not one with default settings. A fresh
    copy (from its config, with the values of its trainable weights) runs
    on one device and, created inside the strategy's scope, on each replica
    in a `tf.function`, so that a loss holding state (a memory bank) starts
    each run from its initial state; the gradients are
    taken with respect to `y_pred`, to `y_true` when it is floating (two
    views), and to the loss's `trainable_weights` when it has some. Under
    the global-batch contract the replicas' values add up to the one-device
    value for every reduction (they concatenate to it for `"none"`), their
    gradients with respect to their own rows are the one-device gradients of
    those rows, and their gradients of the loss's weights add up to the
    one-device gradients.

    Args:
        loss: The loss to check; it is copied, not called.
        y_true: `[batch, ...]` labels or first view.
        y_pred: `[batch, ...]` embeddings or second view.
        replicas: The numbers of replicas to compare with, each at most the
            number of logical CPUs (see `mirrored_strategy`).

    Returns:
        One `Parity` per number of replicas.

    Raises:
        AssertionError: When `loss` rebuilt from its config holds other
            settings (`assert_config_round_trip`).
        ValueError: When the one-device value is not a scalar, or for
            `reduction="none"` not `[batch]` (one term per row): values of
            another shape could concatenate to the one-device value and
            still break the contract.
    """
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    differentiable = np.issubdtype(y_true.dtype, np.floating)
    assert_config_round_trip(loss)
    reference = _one_device(_copy(loss), y_true, y_pred, differentiable)
    _check_value_shape(loss, reference[0], len(y_pred))
    scale = max(float(np.max(np.abs(r))) if np.size(r) else 0.0 for r in reference)
    results = []
    for k in replicas:
        sizes = uneven_sizes(len(y_pred), k)
        got = _on_replicas(loss, y_true, y_pred, sizes, differentiable)
        value_error = _max_error(got[0], reference[0])
        gradient_error = max(_max_error(g, r) for g, r in zip(got[1:], reference[1:], strict=True))
        results.append(Parity(k, sizes, value_error, gradient_error, scale))
    return results


def assert_replica_parity(
    loss: keras.losses.Loss,
    y_true: Any,
    y_pred: Any,
    replicas: Sequence[int] = (2, 4, 8),
    *,
    rtol: float = 1e-12,
    atol: float = 1e-12,
) -> list[Parity]:
    """Fails unless `K` replicas give the one-device value and gradients (`replica_parity`).

    A difference passes when it is at most `atol + rtol * scale`, `scale`
    being the largest one-device value or gradient. The defaults suit
    float64 inputs and a loss of `dtype="float64"`.

    Example:

    ```python
    import numpy as np
    from tensorflow_similarity.losses import TripletLoss
    from tensorflow_similarity.testing import assert_replica_parity

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=24)
    embeddings = rng.normal(size=(24, 5))
    assert_replica_parity(TripletLoss(dtype="float64"), labels, embeddings)
    ```

    Returns:
        The `Parity` of each number of replicas.

    Raises:
        AssertionError: Naming the number of replicas, the part sizes and
            the errors, when a value or a gradient differs by more.
    """
    results = replica_parity(loss, y_true, y_pred, replicas)
    for result in results:
        tolerance = atol + rtol * result.scale
        if max(result.value_error, result.gradient_error) > tolerance:
            raise AssertionError(
                f"{type(loss).__name__} on {result.replicas} replicas holding "
                f"{list(result.sizes)} rows differs from one device: value error "
                f"{result.value_error:.3g}, gradient error {result.gradient_error:.3g} "
                f"(tolerance {tolerance:.3g})."
            )
    return results


def _check_value_shape(loss: keras.losses.Loss, value: np.ndarray, batch: int) -> None:
    per_sample = getattr(loss, "reduction", None) in (None, "none")
    expected = (batch,) if per_sample else ()
    if np.shape(value) != expected:
        raise ValueError(
            f"{type(loss).__name__} returned a value of shape {list(np.shape(value))} on one "
            f"device for a batch of {batch}, and its reduction "
            f"{getattr(loss, 'reduction', None)!r} must give shape {list(expected)}"
            f"{' (one term per sample)' if per_sample else ' (a scalar)'}."
        )


def _copy(loss: keras.losses.Loss) -> keras.losses.Loss:
    copy = type(loss).from_config(loss.get_config())
    for mine, theirs in zip(_weights(copy), _weights(loss), strict=True):
        mine.assign(theirs.numpy())
    return copy


def _weights(loss: keras.losses.Loss) -> list[Any]:
    return list(getattr(loss, "trainable_weights", []))


def _max_error(got: np.ndarray, expected: np.ndarray) -> float:
    if np.shape(got) != np.shape(expected):
        return float("inf")
    return float(np.max(np.abs(got - expected))) if np.size(expected) else 0.0


def _values_and_gradients(loss, y_true, y_pred, differentiable):
    with tf.GradientTape() as tape:
        watched = [y_pred, y_true] if differentiable else [y_pred]
        tape.watch(watched)
        value = loss(y_true, y_pred)
    gradients = tape.gradient(value, watched + _weights(loss), unconnected_gradients="zero")
    return value, gradients


def _one_device(loss, y_true, y_pred, differentiable):
    value, gradients = _values_and_gradients(
        loss, tf.constant(y_true), tf.constant(y_pred), differentiable
    )
    return [value.numpy(), *[g.numpy() for g in gradients]]


def _on_replicas(loss, y_true, y_pred, sizes, differentiable):
    strategy = mirrored_strategy(len(sizes))
    with strategy.scope():
        copy = _copy(loss)
    run = run_on_replicas(
        lambda t, p: _values_and_gradients(copy, t, p, differentiable),
        (y_true, y_pred),
        sizes,
        strategy=strategy,
    )
    values = [value for value, _ in run.results]
    gradients = list(zip(*(grads for _, grads in run.results), strict=True))
    value = np.concatenate(values) if np.ndim(values[0]) else np.sum(values)
    rows = 2 if differentiable else 1
    # Rows' gradients concatenate; a weight's add up over the replicas, as the strategy sums them.
    gradients = [
        np.concatenate(each) if i < rows else np.sum(each, axis=0)
        for i, each in enumerate(gradients)
    ]
    return [value, *gradients]
