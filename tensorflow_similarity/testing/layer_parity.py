"""One device against K replicas: the parity check of a layer's training step.

Testing tooling (the package itself never imports it). `assert_layer_parity`
runs one training call of a layer on one device holding the whole batch, and
on `K` replicas holding given, unequal parts of it (`run_on_replicas`), and
compares the outputs, the gradients and the moving statistics (the layer's
non-trainable weights) after the step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity.testing.replicas import mirrored_strategy, run_on_replicas


class LayerParity(NamedTuple):
    """What `assert_layer_parity` compared, on the replicas.

    Attributes:
        sizes: The rows each replica held.
        outputs: The replicas' outputs, their rows concatenated.
        gradients: The gradients with respect to the inputs (rows
            concatenated), then to each trainable weight (added up over the
            replicas, as the optimizer adds them).
        moving: The non-trainable weights after the step, by name.
        function: The traced replica step, for `count_collectives`.
    """

    sizes: tuple[int, ...]
    outputs: np.ndarray
    gradients: list[np.ndarray]
    moving: dict[str, np.ndarray]
    function: tf.types.experimental.ConcreteFunction


def assert_layer_parity(
    layer_factory: Callable[[], keras.layers.Layer],
    inputs: Any,
    sizes: Sequence[int],
    *,
    upstream: Any = None,
    mask: Any = None,
    reference_factory: Callable[[], keras.layers.Layer] | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-6,
) -> LayerParity:
    """Fails unless a layer's training step on `K` replicas is its step on one device.

    The step is `layer(x, training=True)` (with `mask=` when a mask is
    given) and the scalar `sum(y * upstream)`. On one device a layer from
    `reference_factory` holds the whole batch; on `len(sizes)` replicas
    (`mirrored_strategy`) a layer from `layer_factory`, created inside the
    strategy's scope, holds the consecutive rows `sizes` gives each replica.
    The replicas' outputs and input gradients, rows concatenated, must be
    the one-device ones; their gradients of each trainable weight, added up,
    the one-device gradients; and every non-trainable weight (a batch
    norm's moving mean and variance) must hold the one-device value after
    the step.

    Args:
        layer_factory: Returns the built layer to run on the replicas, with
            its initial weights; it is called inside the strategy's scope.
        inputs: `[batch, ...]` array, `sum(sizes)` rows.
        sizes: The rows of each replica; they may differ, and be 0.
        upstream: The weights of the outputs in the scalar differentiated,
            of the outputs' shape. Defaults to `None`: fixed values that
            differ from element to element (a constant one would hide a
            wrong gradient of a normalising layer, whose input gradient of
            `sum(y)` is zero).
        mask: Optional `[batch, ...]` mask, passed as `mask=`.
        reference_factory: Returns the built one-device layer with the same
            initial weights (plain `keras.layers.BatchNormalization` against
            a synchronised one). Defaults to `None`: `layer_factory`.
        rtol: Relative tolerance of every comparison.
        atol: Absolute tolerance of every comparison.

    Returns:
        The replicas' `LayerParity`.

    Raises:
        AssertionError: Naming the output, gradient or weight that differs.
        ValueError: When the layers' weights do not correspond (another
            number of trainable weights, a non-trainable weight missing).

    Example:

    ```python
    import keras
    import numpy as np
    from tensorflow_similarity.layers import SyncBatchNormalization
    from tensorflow_similarity.testing import assert_layer_parity

    def synchronised():
        layer = SyncBatchNormalization(momentum=0.5)
        layer.build((None, 3))
        return layer

    def plain():
        layer = keras.layers.BatchNormalization(momentum=0.5)
        layer.build((None, 3))
        return layer

    x = np.random.default_rng(0).normal(size=(7, 3)).astype("float32")
    assert_layer_parity(synchronised, x, [2, 5], reference_factory=plain, rtol=1e-4, atol=1e-4)
    ```
    """
    x = np.asarray(inputs)
    sizes = tuple(int(s) for s in sizes)
    reference = (reference_factory or layer_factory)()
    shape = tuple(reference.compute_output_shape(x.shape))
    upstream = np.broadcast_to(_default_upstream(shape) if upstream is None else upstream, shape)
    y_ref, grads_ref = _traced_step(reference, tf.constant(x), tf.constant(upstream), mask)
    y_ref, grads_ref = y_ref.numpy(), [g.numpy() for g in grads_ref]
    moving_ref = _moving(reference)

    strategy = mirrored_strategy(len(sizes))
    with strategy.scope():
        layer = layer_factory()
    if len(layer.trainable_weights) != len(reference.trainable_weights):
        raise ValueError(
            f"The replicas' {type(layer).__name__} has {len(layer.trainable_weights)} trainable "
            f"weights and the one-device {type(reference).__name__} "
            f"{len(reference.trainable_weights)}: build both with the same weights."
        )
    arrays = [x, upstream]
    if mask is not None:
        arrays.append(np.asarray(mask))

    def replica_step(x, upstream, mask=None):
        return _traced_step(layer, x, upstream, mask)

    run = run_on_replicas(replica_step, arrays, sizes, strategy=strategy)
    outputs = run.concatenated(lambda r: r[0])
    gradients = [run.concatenated(lambda r: r[1][0]), *run.summed(lambda r: r[1][1:])]
    moving = _moving(layer)

    def close(got, expected, what):
        np.testing.assert_allclose(
            np.asarray(got, "float64"),
            np.asarray(expected, "float64"),
            rtol=rtol,
            atol=atol,
            err_msg=f"{what} on {len(sizes)} replicas holding {list(sizes)} rows",
        )

    close(outputs, y_ref, "outputs")
    close(gradients[0], grads_ref[0], "gradient of the inputs")
    for weight, got, expected in zip(
        reference.trainable_weights, gradients[1:], grads_ref[1:], strict=True
    ):
        close(got, expected, f"gradient of {weight.name}")
    for name, expected in moving_ref.items():
        if name not in moving:
            raise ValueError(
                f"The replicas' {type(layer).__name__} has no non-trainable weight {name!r}, "
                f"which the one-device {type(reference).__name__} has; it has "
                f"{sorted(moving)}."
            )
        close(moving[name], expected, f"{name} after the step")
    return LayerParity(sizes, outputs, gradients, moving, run.function)


def _default_upstream(shape: tuple[int, ...]) -> np.ndarray:
    return np.cos(np.arange(int(np.prod(shape)), dtype="float64")).reshape(shape)


def _traced_step(layer, x, upstream, mask):
    with tf.GradientTape() as tape:
        tape.watch(x)
        kwargs = {} if mask is None else {"mask": tf.convert_to_tensor(mask)}
        y = layer(x, training=True, **kwargs)
        # Half-precision outputs are weighted in float32, as a mixed-precision loss is summed.
        dtype = tf.float32 if y.dtype in (tf.float16, tf.bfloat16) else y.dtype
        loss = tf.reduce_sum(tf.cast(y, dtype) * tf.cast(upstream, dtype))
    gradients = tape.gradient(loss, [x, *layer.trainable_weights], unconnected_gradients="zero")
    return y, gradients


def _moving(layer: keras.layers.Layer) -> dict[str, np.ndarray]:
    return {w.name: np.asarray(w.numpy()) for w in layer.non_trainable_weights}
