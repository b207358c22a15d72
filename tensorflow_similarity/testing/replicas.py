"""Runs a function on `K` replicas of one process, each holding its own rows of a batch.

Testing tooling (the package itself never imports it). `mirrored_strategy(k)`
is the one `MirroredStrategy` over the first `k` logical CPUs of the process;
`run_on_replicas` splits a batch into given, possibly unequal and empty,
consecutive parts, runs a function on each replica with its part in one
`tf.function`, and returns every replica's results as NumPy arrays with the
traced step (for `count_collectives`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

_STRATEGIES: dict[int, tf.distribute.MirroredStrategy] = {}


class _KeyedMirroredStrategy(tf.distribute.MirroredStrategy):
    """A MirroredStrategy whose collective keys cannot collide with another size's."""


def mirrored_strategy(num_replicas: int) -> tf.distribute.MirroredStrategy:
    """Returns the (cached) `MirroredStrategy` over the first `num_replicas` logical CPUs.

    Two `MirroredStrategy` objects of different sizes in one process would
    reuse the same collective group keys, so each size gets its own range.
    The logical CPUs must be made before TensorFlow initialises, e.g. in a
    `conftest.py`: `tf.config.set_logical_device_configuration(cpu,
    [tf.config.LogicalDeviceConfiguration()] * 8)`.

    Args:
        num_replicas: Number of replicas, at most the number of logical CPUs.

    Returns:
        The same strategy object for every call with the same `num_replicas`.

    Raises:
        ValueError: When there are fewer logical CPUs than `num_replicas`.
    """
    if num_replicas not in _STRATEGIES:
        cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
        if num_replicas > len(cpus):
            raise ValueError(
                f"{num_replicas} replicas need as many logical CPUs, and TensorFlow has "
                f"{len(cpus)}. Split the CPU before TensorFlow initialises (e.g. in "
                "conftest.py): tf.config.set_logical_device_configuration(cpu, "
                f"[tf.config.LogicalDeviceConfiguration()] * {num_replicas})."
            )
        cls = type(
            f"MirroredStrategy{num_replicas}",
            (_KeyedMirroredStrategy,),
            {"_collective_key_base": 10_000 * num_replicas},
        )
        _STRATEGIES[num_replicas] = cls(cpus[:num_replicas])
    return _STRATEGIES[num_replicas]


class ReplicaRun(NamedTuple):
    """What `run_on_replicas` returns.

    Attributes:
        results: One entry per replica, in replica order: what the function
            returned there, with every tensor as a NumPy array (`None`
            stays `None`).
        sizes: The rows each replica held.
        function: The traced step, for `count_collectives`; `None` when
            the replicas ran eagerly (`traced=False`).
    """

    results: list[Any]
    sizes: tuple[int, ...]
    function: tf.types.experimental.ConcreteFunction | None

    def concatenated(self, part: Callable[[Any], Any] | None = None) -> Any:
        """The replicas' results joined along their first axis (rows), leaf by leaf.

        Args:
            part: Picks what to join from one replica's result (e.g.
                `lambda r: r[0]`). Defaults to `None`: the whole result.

        Returns:
            The nest of the joined arrays; a scalar leaf becomes a vector of
            one entry per replica.
        """
        return tf.nest.map_structure(
            lambda *leaves: np.concatenate([np.reshape(v, (-1, *np.shape(v)[1:])) for v in leaves]),
            *self._parts(part),
        )

    def summed(self, part: Callable[[Any], Any] | None = None) -> Any:
        """The replicas' results added up, leaf by leaf, as an optimizer adds gradients.

        Args:
            part: Picks what to add from one replica's result. Defaults to
                `None`: the whole result.

        Returns:
            The nest of the sums.
        """
        return tf.nest.map_structure(lambda *leaves: np.sum(leaves, axis=0), *self._parts(part))

    def _parts(self, part: Callable[[Any], Any] | None) -> list[Any]:
        return [r if part is None else part(r) for r in self.results]


def run_on_replicas(
    fn: Callable[..., Any],
    inputs: Any,
    sizes: Sequence[int],
    *,
    strategy: tf.distribute.Strategy | None = None,
    traced: bool = True,
) -> ReplicaRun:
    """Runs `fn` on `len(sizes)` replicas, replica `i` holding the next `sizes[i]` rows.

    Every array of `inputs` is split along its first axis into consecutive
    parts of `sizes` rows (a part may be empty); replica `i` calls `fn` with
    its part of each array, in the order of `inputs`, inside one
    `tf.function` running `strategy.run`. Create the variables `fn` uses
    inside `strategy.scope()` (a layer built there is mirrored).

    Args:
        fn: The per-replica function; it receives one tensor per array of
            `inputs` and returns a nest of tensors (or `None`s).
        inputs: One array, or a tuple or list of arrays, each
            `[sum(sizes), ...]`.
        sizes: The rows of each replica, one entry per replica.
        strategy: The strategy to run under; it must have `len(sizes)`
            replicas. Defaults to `None`: `mirrored_strategy(len(sizes))`.
        traced: Whether `strategy.run` runs in a `tf.function` (as `fit`
            runs a step). Defaults to `True`; `False` runs it eagerly, which
            traces nothing, and `ReplicaRun.function` is then `None`.

    Returns:
        A `ReplicaRun` holding every replica's results as NumPy arrays.

    Raises:
        ValueError: When `sizes` is empty or holds a negative size, when an
            array does not have `sum(sizes)` rows, or when `strategy` has
            another number of replicas or some outside this process; raised
            before anything is traced.

    Example:

    ```python
    import numpy as np
    import tensorflow as tf
    from tensorflow_similarity.testing import run_on_replicas

    def replica_sum(x):
        # Each replica sums its own rows, then the replicas add their sums.
        return tf.distribute.get_replica_context().all_reduce("sum", tf.reduce_sum(x, 0))

    x = np.arange(12.0).reshape(6, 2)
    run = run_on_replicas(replica_sum, x, sizes=[1, 0, 5])
    assert all(np.array_equal(r, x.sum(0)) for r in run.results)
    ```
    """
    arrays = [np.asarray(a) for a in (inputs if isinstance(inputs, (tuple, list)) else [inputs])]
    sizes = tuple(int(s) for s in sizes)
    batch = sum(sizes)
    if not sizes or min(sizes) < 0:
        raise ValueError(
            f"sizes must hold one non-negative row count per replica. Received: sizes={sizes}."
        )
    for index, array in enumerate(arrays):
        if np.ndim(array) == 0 or len(array) != batch:
            raise ValueError(
                f"Input {index} has shape {list(np.shape(array))}, and sizes={list(sizes)} "
                f"split {batch} rows. Pass arrays of {batch} rows, or sizes that add up to "
                "their number of rows."
            )
    strategy = strategy or mirrored_strategy(len(sizes))
    if strategy.num_replicas_in_sync != len(sizes):
        raise ValueError(
            f"sizes={list(sizes)} names {len(sizes)} replicas, and the strategy has "
            f"{strategy.num_replicas_in_sync}. Pass one size per replica."
        )
    if len(strategy.extended.worker_devices) != len(sizes):
        raise ValueError(
            f"run_on_replicas returns every replica's results, and this process holds "
            f"{len(strategy.extended.worker_devices)} of the strategy's {len(sizes)} replicas "
            "(a multi-worker strategy). Run each worker's part with strategy.run there."
        )
    bounds = np.cumsum([0, *sizes])
    parts = [tuple(a[bounds[i] : bounds[i + 1]] for a in arrays) for i in range(len(sizes))]
    distributed = strategy.experimental_distribute_values_from_function(
        lambda ctx: tuple(tf.constant(p) for p in parts[ctx.replica_id_in_sync_group])
    )

    def step(args):
        return strategy.run(fn, args=args)

    if traced:
        step = tf.function(step)
    output = step(distributed)
    local = strategy.experimental_local_results
    per_leaf = [_per_replica(leaf, local, len(sizes)) for leaf in tf.nest.flatten(output)]
    results = [
        tf.nest.pack_sequence_as(output, [leaf[i] for leaf in per_leaf]) for i in range(len(sizes))
    ]
    function = step.get_concrete_function(distributed) if traced else None
    return ReplicaRun(results, sizes, function)


def _per_replica(leaf: Any, local: Callable[[Any], tuple[Any, ...]], replicas: int) -> list[Any]:
    if leaf is None:
        return [None] * replicas
    values = [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in local(leaf)]
    # A value that is not per replica (a constant every replica returned) is each one's.
    return values * replicas if len(values) == 1 else values
