"""Cached-embedding steps: a batch's exact gradients with one chunk's activations at a time.

GradCache (Gao, Zhang, Han and Callan, 2021, "Scaling Deep Contrastive
Learning Batch Size under Memory Limited Setup"). A loss that compares every
sample with every other (SupCon, MultiNegativesRank, SimCLR's NT-Xent)
improves with the batch, while the activations of a large batch do not fit
on a device; accumulating the gradients of smaller batches is not the same
loss. The cached step is:

1. Embed the batch chunk by chunk, keeping only the embeddings (no tape, so
   each chunk's activations are freed before the next chunk runs).
2. Take the loss of the whole batch's embeddings and its gradient with
   respect to the embeddings (and to the loss's own weights) under one tape.
3. Embed each chunk again under a tape and backpropagate its rows of that
   gradient (`tape.gradient(embeddings, variables, output_gradients=rows)`),
   summing the weight gradients over the chunks.

By the chain rule the loss and every gradient are those of one pass over the
whole batch, as long as a sample's embedding depends on that sample alone.
Batch normalisation is the exception: its statistics are those of the
forward pass that runs, so here of one chunk (see `cached_embedding_step`).
Under `tf.distribute` each replica runs its own chunks; a loss on the global
batch (`GlobalBatchLoss`) gathers the replicas' embeddings in step 2 only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from tensorflow_similarity._validation import check_int

__all__ = [
    "CachedStep",
    "cached_embedding_step",
    "check_chunk_size",
    "chunk_count",
    "embed_in_chunks",
]


class CachedStep(NamedTuple):
    """What `cached_embedding_step` returns.

    Attributes:
        loss: The value `loss_fn` returned on the whole batch's embeddings.
        embeddings: The whole batch's embeddings (the nest `embed` returns,
            chunks joined along the first axis), without gradient.
        gradients: One entry per variable, in order: the gradient of `loss`,
            or `None` for a variable that neither the embeddings nor the
            loss depend on.
    """

    loss: tf.Tensor
    embeddings: Any
    gradients: list[tf.Tensor | None]


def check_chunk_size(chunk_size: Any, owner: str | None = None) -> int | None:
    """Returns `chunk_size` as an `int` (or `None`: no chunks), or raises before any work.

    Args:
        chunk_size: `None` or a positive integer: the samples per chunk.
        owner: The class or function the user called, for the message.

    Returns:
        `None`, or `int(chunk_size)`.

    Raises:
        ValueError: For anything but `None` or a positive integer.
    """
    return check_int(
        "chunk_size",
        chunk_size,
        minimum=1,
        allow_none=True,
        owner=owner,
        hint="It is the number of samples of each replica's batch embedded at once.",
    )


def chunk_count(batch: Any, chunk_size: int, owner: str | None = None) -> tf.Tensor | int:
    """The number of chunks of a replica's batch; the chunk size must divide the batch.

    The rule: every chunk holds exactly `chunk_size` samples, so `chunk_size`
    must divide each replica's batch (with `K` replicas, the global batch over
    `K`). A batch whose size is known when the step is traced is checked
    then; one known only at run time (a dataset's last, partial batch) is
    checked before the first chunk runs.

    Args:
        batch: The replica's batch size: an `int`, or a scalar tensor.
        chunk_size: The samples per chunk.
        owner: The class or function the user called, for the message.

    Returns:
        `batch // chunk_size`: an `int` when `batch` is one, else a tensor.

    Raises:
        ValueError: When a static `batch` is not a multiple of `chunk_size`.
        tf.errors.InvalidArgumentError: The same, at run time.
    """
    prefix = f"{owner}: " if owner else ""
    fix = (
        "Use a chunk_size that divides each replica's batch, and batches of one size "
        "(e.g. dataset.batch(n, drop_remainder=True))."
    )
    if isinstance(batch, int):
        if batch % chunk_size:
            raise ValueError(
                f"{prefix}chunk_size={chunk_size} does not divide the replica's batch of "
                f"{batch} samples: every chunk must hold exactly chunk_size samples. {fix}"
            )
        return batch // chunk_size
    batch = tf.convert_to_tensor(batch)
    check = tf.debugging.Assert(
        tf.equal(batch % chunk_size, 0),
        [
            f"{prefix}chunk_size={chunk_size} does not divide the replica's batch of",
            batch,
            f"samples: every chunk must hold exactly chunk_size samples. {fix}",
        ],
    )
    with tf.control_dependencies([check] if check is not None else []):
        return tf.identity(batch // chunk_size)


def cached_embedding_step(
    embed: Callable[[Any], Any],
    inputs: Any,
    loss_fn: Callable[[Any], tf.Tensor],
    chunk_size: int,
    variables: Sequence[Any],
    state: Sequence[Any] = (),
    owner: str | None = None,
) -> CachedStep:
    """The loss of a batch and its gradients, embedding `chunk_size` samples at a time.

    Pass 1 runs `embed` on each chunk of `inputs` without recording
    gradients and joins the embeddings; `loss_fn` then runs once, on the
    whole batch's embeddings, under a tape that gives its gradient with
    respect to the embeddings and to any of `variables` it reads itself (a
    loss's trainable weights, weight regularisation). Pass 2 runs `embed` on
    each chunk again under a tape and backpropagates the chunk's rows of
    the embeddings' gradient into `variables`. The loss and the gradients
    equal one pass over the whole batch whenever a sample's embedding
    depends on that sample alone (no batch normalisation); the gradients
    are added up in chunk order, so they agree with one pass to rounding.

    Pass 2 must compute what pass 1 computed. The `state` variables (the
    model's non-trainable ones: random seed states, batch norms' moving
    statistics) are read before pass 1 and assigned back before pass 2, so
    that each chunk draws the same random values in both passes (Keras'
    `Dropout`, `GaussianNoise` and random augmentation layers keep their
    seeds in such state) and every chunk's update of moving statistics
    counts once: after the step they hold what pass 1 (equally pass 2) left.
    Random ops whose state is not among `state` (TensorFlow's global
    `tf.random.*`, `keras.random` without a `SeedGenerator`) draw again in
    pass 2, so the gradient would not be that of the loss: keep randomness
    in layers with a seed generator.

    Batch normalisation in training mode normalises each chunk with the
    chunk's own statistics (per replica; a synchronised batch norm's are the
    replicas' chunks together), identically in both passes, and updates its
    moving statistics once per chunk, in chunk order, as `batch /
    chunk_size` smaller batches would.

    The chunks run one after the other: each chunk's rows are taken once the
    previous chunk is done, so its activations are freed before the next
    chunk's exist. A batch whose size is known when the step is traced runs
    its chunks as one unrolled sequence; one known only at run time runs them
    in a `tf.while_loop` (the first chunk before it, for the embeddings'
    structure), in which `tf.distribute` allows no synchronisation: under a
    strategy, a model that synchronises in its forward pass
    (`SyncBatchNormalization`) needs batches of a static size (a dataset
    batched with `drop_remainder=True`).

    Args:
        embed: Embeds one chunk: a function of a nest of `[chunk_size, ...]`
            tensors (the rows of `inputs`), returning a nest of
            `[chunk_size, ...]` embeddings. It is traced up to three times
            (the first chunk, pass 1's loop, pass 2's loop).
        inputs: A nest of tensors whose first axis is the batch.
        loss_fn: The loss of the whole batch: a function of the joined
            embeddings (the nest `embed` returns), returning the scalar to
            differentiate (e.g. scaled for the optimizer).
        chunk_size: Samples per chunk; must divide the batch (see
            `chunk_count`).
        variables: The variables to differentiate, e.g. the model's
            `trainable_variables`.
        state: Variables that `embed` updates and that must be the same at
            the start of both passes. Defaults to `()`. Leave out variables
            that `loss_fn` updates: their pass-1 update would be undone.
        owner: The class or function the user called, for messages.

    Returns:
        A `CachedStep`: the loss, the embeddings and the gradients.

    Raises:
        ValueError: When `chunk_size` is not a positive integer or does not
            divide a static batch size (before any chunk runs).
        tf.errors.InvalidArgumentError: When it does not divide a batch
            size known only at run time (before any chunk runs).

    Example:

    >>> import keras
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.models.cached_embeddings import cached_embedding_step
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> x = tf.random.stateless_normal((8, 3), seed=(0, 1))
    >>> loss_fn = lambda z: tf.reduce_sum(tf.matmul(z, z, transpose_b=True) ** 2)
    >>> step = cached_embedding_step(model, x, loss_fn, 2, model.trainable_variables)
    >>> with tf.GradientTape() as tape:
    ...     loss = loss_fn(model(x))
    >>> expected = tape.gradient(loss, model.trainable_variables)
    >>> all(
    ...     float(tf.reduce_max(tf.abs(a - b))) < 1e-3 * float(tf.reduce_max(tf.abs(b)))
    ...     for a, b in zip(step.gradients, expected)
    ... )
    True
    """
    chunks, embed_chunk, structure = _chunks(
        embed, inputs, chunk_size, "cached_embedding_step", owner
    )
    variables = list(variables)
    state = list(state)
    saved = [tf.identity(v) for v in state]
    embeddings = _embed_without_tape(embed_chunk, chunks, structure)
    flat_embeddings = tf.nest.flatten(embeddings)

    with tf.GradientTape() as tape:
        tape.watch(flat_embeddings)
        loss = loss_fn(embeddings)
    found = tape.gradient(loss, [*flat_embeddings, *variables])
    embedding_grads = [
        tf.zeros_like(e) if g is None else tf.convert_to_tensor(g)
        for e, g in zip(flat_embeddings, found[: len(flat_embeddings)], strict=True)
    ]

    # Pass 2 starts from the state pass 1 started from (a tf.function orders the
    # assignments before pass 2's reads of the same variables).
    for variable, value in zip(state, saved, strict=True):
        variable.assign(value)
    reached = [False] * len(variables)

    def backpropagate(i: Any, sums: list[tf.Tensor], after: Sequence[tf.Tensor]):
        with tf.GradientTape() as chunk_tape:
            flat = embed_chunk(i, after)
        start = i * chunk_size
        upstream = [g[start : start + chunk_size] for g in embedding_grads]
        grads = chunk_tape.gradient(flat, variables, output_gradients=upstream)
        added = []
        for k, (total, g) in enumerate(zip(sums, grads, strict=True)):
            if g is None:
                added.append(total)
            else:
                reached[k] = True
                added.append(total + tf.convert_to_tensor(g))
        return added

    sums = [tf.zeros(v.shape, v.dtype) for v in variables]
    if isinstance(chunks, int):
        for i in range(chunks):
            sums = backpropagate(i, sums, sums if i else [])
    else:
        _, sums = tf.while_loop(
            lambda i, _: i < chunks,
            lambda i, sums: (i + 1, backpropagate(i, sums, [])),
            (tf.constant(0), sums),
            parallel_iterations=1,
        )
    gradients = []
    for k, (loss_grad, total) in enumerate(zip(found[len(flat_embeddings) :], sums, strict=True)):
        terms = ([total] if reached[k] else []) + (
            [] if loss_grad is None else [tf.convert_to_tensor(loss_grad)]
        )
        gradients.append(tf.add_n(terms) if terms else None)
    return CachedStep(loss=loss, embeddings=embeddings, gradients=gradients)


def embed_in_chunks(
    embed: Callable[[Any], Any], inputs: Any, chunk_size: int, owner: str | None = None
) -> Any:
    """Runs `embed` on `chunk_size` rows of `inputs` at a time, without gradient; joins them.

    Pass 1 of `cached_embedding_step` on its own, for outputs that take no
    gradient (a momentum teacher's): each chunk runs once the previous one is
    done, so only one chunk's activations exist at a time.

    Args:
        embed: A function of a nest of `[chunk_size, ...]` rows of `inputs`,
            returning a nest of `[chunk_size, ...]` tensors.
        inputs: A nest of tensors whose first axis is the batch.
        chunk_size: Samples per chunk; must divide the batch (see `chunk_count`).
        owner: The class or function the user called, for messages.

    Returns:
        The nest `embed` returns, the chunks joined along the first axis in
        order, under `tf.stop_gradient`.

    Raises:
        ValueError: As `cached_embedding_step`.
        tf.errors.InvalidArgumentError: As `cached_embedding_step`.

    Example:

    >>> import tensorflow as tf
    >>> from tensorflow_similarity.models.cached_embeddings import embed_in_chunks
    >>> x = tf.reshape(tf.range(8.0), (4, 2))
    >>> embed_in_chunks(lambda rows: tf.reduce_sum(rows, axis=1), x, 2).numpy()
    array([ 1.,  5.,  9., 13.], dtype=float32)
    """
    chunks, embed_chunk, structure = _chunks(embed, inputs, chunk_size, "embed_in_chunks", owner)
    return _embed_without_tape(embed_chunk, chunks, structure)


def _chunks(embed: Callable, inputs: Any, chunk_size: Any, caller: str, owner: str | None) -> tuple:
    """Checks `chunk_size` against `inputs`; returns the chunk count and `embed` of chunk `i`.

    `embed_chunk(i, after)` embeds chunk `i` once the tensors `after` exist and
    returns its flat outputs; the last call's nest is kept in `structure[0]`.
    """
    prefix = f"{owner}: " if owner else ""
    chunk_size = check_chunk_size(chunk_size, owner)
    if chunk_size is None:
        raise ValueError(f"{prefix}{caller} needs a chunk_size, received None.")
    flat_inputs = [tf.convert_to_tensor(t) for t in tf.nest.flatten(inputs)]
    if not flat_inputs:
        raise ValueError(f"{prefix}the batch holds no tensors to split into chunks.")
    static_batch = flat_inputs[0].shape[0]
    batch = static_batch if static_batch is not None else tf.shape(flat_inputs[0])[0]
    chunks = chunk_count(batch, chunk_size, owner)

    def rows(i: Any) -> Any:
        start = i * chunk_size
        parts = [t[start : start + chunk_size] for t in flat_inputs]
        return tf.nest.pack_sequence_as(inputs, parts)

    structure = []

    def embed_chunk(i: Any, after: Sequence[tf.Tensor]) -> list[tf.Tensor]:
        # A chunk's rows are sliced once the previous chunk's results exist, so the
        # graph never runs two chunks at once (which would hold both's activations).
        with tf.control_dependencies(list(after) or None):
            chunk = rows(i)
        outputs = embed(chunk)
        structure[:] = [outputs]
        return tf.nest.flatten(outputs)

    return chunks, embed_chunk, structure


def _embed_without_tape(
    embed_chunk: Callable[[Any, Sequence[tf.Tensor]], list[tf.Tensor]],
    chunks: tf.Tensor | int,
    structure: list,
) -> Any:
    """Pass 1: every chunk's flat outputs under `stop_gradient`, joined, packed as `structure`."""
    # Nothing records gradients here (the caller holds no tape), and stop_gradient
    # makes sure of it even under an outer tape.
    if isinstance(chunks, int):
        parts: list[list[tf.Tensor]] = []
        for i in range(chunks):
            flat = embed_chunk(i, parts[-1] if parts else [])
            parts.append([tf.stop_gradient(e) for e in flat])
        flat_embeddings = [tf.concat(list(column), axis=0) for column in zip(*parts, strict=True)]
    else:
        first = [tf.stop_gradient(e) for e in embed_chunk(0, [])]
        arrays = [
            tf.TensorArray(e.dtype, size=chunks - 1, element_shape=e.shape, infer_shape=True)
            for e in first
        ]

        def embed_rest(i, arrays):
            flat = embed_chunk(i, [])
            return i + 1, [
                a.write(i - 1, tf.stop_gradient(e)) for a, e in zip(arrays, flat, strict=True)
            ]

        _, arrays = tf.while_loop(
            lambda i, _: i < chunks, embed_rest, (tf.constant(1), arrays), parallel_iterations=1
        )
        flat_embeddings = [
            tf.concat([e, tf.reshape(a.stack(), [-1, *e.shape[1:]])], axis=0)
            for e, a in zip(first, arrays, strict=True)
        ]
    return tf.nest.pack_sequence_as(structure[0], flat_embeddings)
