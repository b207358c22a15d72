"""`TFDataSampler`: a `tf.data` pipeline of class-balanced batches."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_int
from tensorflow_similarity.samplers._inputs import check_class_list

_LABEL_PASS_BATCH = 65536


def TFDataSampler(  # noqa: N802 - 0.18's public name
    ds: tf.data.Dataset,
    classes_per_batch: int = 2,
    examples_per_class_per_batch: int = 2,
    class_list: Sequence[int] | None = None,
    total_examples_per_class: int | None = None,
    augmenter: Callable[..., Any] | None = None,
    load_fn: Callable[..., Any] | None = None,
    warmup: int = 0,
    label_output: int | str | None = None,
    *,
    seed: int | None = None,
    allow_replacement: bool = True,
) -> tf.data.Dataset:
    """Returns an endless `tf.data.Dataset` of class-balanced batches drawn from `ds`.

    Every batch holds `classes_per_batch` distinct classes, drawn at random
    for each batch, with `examples_per_class_per_batch` examples of each,
    grouped by class: batch size `classes_per_batch *
    examples_per_class_per_batch`. (0.18's version, where this function first
    appeared, could repeat a class in a batch when the number of classes was
    not a multiple of `classes_per_batch`.) Each class is a stream of its
    examples (at most the first `total_examples_per_class` of them), shuffled
    anew at each pass and repeated; a pass uses a whole number of groups of
    `examples_per_class_per_batch`, so the examples of a class in a batch are
    distinct, unless the class has fewer than that: a warning names such
    classes, or an error with `allow_replacement=False`.

    The labels are read once, when the function is called, to find the classes
    and their sizes; each class's stream is then a filtered pass over `ds`, so
    an expensive `ds` (decoding, reading from disk) gains from `ds.cache()`.
    `load_fn` and then `augmenter` are mapped over single examples; the
    augmenter is skipped for the first `warmup` examples. The result is
    endless: give `fit` a `steps_per_epoch`.

    Under a `tf.distribute` strategy, Keras splits each batch of this dataset
    over the replicas, so one batch is the global batch and a loss mining the
    global batch sees all its classes with all their examples.

    Args:
        ds: A finite `tf.data.Dataset` of tuples `(x, y, ...)`.
        classes_per_batch: Number of distinct classes in a batch. Defaults to 2.
        examples_per_class_per_batch: Number of examples of each class in a
            batch. Defaults to 2.
        class_list: The classes to sample from. Defaults to `None`: every
            class of `ds`.
        total_examples_per_class: The most examples of each class used (its
            first ones in `ds`). Defaults to `None`: all.
        augmenter: `None` or a callable mapped over single examples
            (`augmenter(x, y, ...)` returns an element of the same structure).
            Defaults to `None`.
        load_fn: `None` or a callable mapped over single examples before the
            augmenter, e.g. to read an image from its path. Defaults to `None`.
        warmup: Number of examples at the start left unaugmented. Defaults to 0.
        label_output: Where the class id is in `y`: `None` when `y` is the id
            itself, an index when `y` is a tuple, a key when `y` is a dict.
            Defaults to `None`.
        seed: Non-negative integer seed of the class draws and the shuffles
            (keyword only); the same seed gives the same batches. Defaults to
            `None`: a random one, drawn once at the call.
        allow_replacement: Whether a class smaller than
            `examples_per_class_per_batch` may repeat examples within a batch
            (keyword only). Defaults to `True`.

    Returns:
        An endless `tf.data.Dataset` of batches, of `ds`'s element structure.

    Raises:
        ValueError: If `ds` is infinite or empty, its elements are not tuples
            `(x, y, ...)`, `label_output` does not locate a scalar class id,
            `class_list` names a class absent from `ds`, `classes_per_batch`
            exceeds the number of classes, a class is too small with
            `allow_replacement=False`, or a count is not a positive integer.
        TypeError: If `ds` is not a `tf.data.Dataset`, the class ids are not
            integers, or `augmenter` or `load_fn` is neither `None` nor callable.

    Example:

    >>> import numpy as np
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.samplers import TFDataSampler
    >>> ds = tf.data.Dataset.from_tensor_slices((tf.random.uniform((60, 3)), tf.range(60) % 6))
    >>> batches = TFDataSampler(ds, classes_per_batch=3, examples_per_class_per_batch=4, seed=0)
    >>> x, y = next(iter(batches))
    >>> x.shape, sorted(np.unique(y, return_counts=True)[1].tolist())
    (TensorShape([12, 3]), [4, 4, 4])
    """
    owner = "TFDataSampler"
    if not isinstance(ds, tf.data.Dataset):
        raise TypeError(f"{owner}: ds must be a tf.data.Dataset. Received {type(ds).__name__}.")
    classes_per_batch = check_int("classes_per_batch", classes_per_batch, minimum=1, owner=owner)
    examples_per_class_per_batch = check_int(
        "examples_per_class_per_batch", examples_per_class_per_batch, minimum=1, owner=owner
    )
    check_int(
        "total_examples_per_class",
        total_examples_per_class,
        minimum=1,
        allow_none=True,
        owner=owner,
    )
    warmup = check_int("warmup", warmup, minimum=0, owner=owner, hint="It counts examples.")
    check_int("seed", seed, minimum=0, allow_none=True, owner=owner)
    check_bool("allow_replacement", allow_replacement, owner=owner)
    for name, fn in (("augmenter", augmenter), ("load_fn", load_fn)):
        if fn is not None and not callable(fn):
            raise TypeError(f"{owner}: {name} must be None or a callable. Received {fn!r}.")
    if ds.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError(
            f"{owner}: ds is infinite (a repeat() without count?). Pass the finite dataset: "
            "the sampler repeats each class itself."
        )
    label_of = _label_reader(ds.element_spec, label_output, owner)

    label_batches = ds.map(label_of).batch(_LABEL_PASS_BATCH).as_numpy_iterator()
    labels = np.concatenate([np.zeros([0], np.int64), *label_batches])
    if labels.size == 0:
        raise ValueError(f"{owner}: ds is empty; pass a dataset with examples.")
    requested = check_class_list(class_list, labels, owner=owner)
    classes = requested if requested is not None else np.unique(labels).tolist()
    if classes_per_batch > len(classes):
        raise ValueError(
            f"{owner}: classes_per_batch={classes_per_batch} exceeds the {len(classes)} classes "
            f"to sample from ({classes}). Lower classes_per_batch or widen class_list."
        )
    sizes = {c: int(np.sum(labels == c)) for c in classes}
    if total_examples_per_class is not None:
        sizes = {c: min(n, total_examples_per_class) for c, n in sizes.items()}
    small = {c: n for c, n in sizes.items() if n < examples_per_class_per_batch}
    if small:
        message = (
            f"{owner}: examples_per_class_per_batch={examples_per_class_per_batch} but these "
            f"classes have fewer examples (class: count): {small}."
        )
        if not allow_replacement:
            raise ValueError(
                f"{message} Lower examples_per_class_per_batch, drop those classes with "
                "class_list, or pass allow_replacement=True to repeat their examples."
            )
        warnings.warn(f"{message} Their batches repeat some examples.", stacklevel=2)

    # One seed per class stream plus one for the class draws, all from `seed`.
    seeds = np.random.SeedSequence(seed).generate_state(len(classes) + 1).tolist()
    streams = []
    for class_id, stream_seed in zip(classes, seeds, strict=False):
        stream = ds.filter(_is_class(label_of, class_id))
        if total_examples_per_class is not None:
            stream = stream.take(total_examples_per_class)
        stream = stream.shuffle(sizes[class_id], seed=stream_seed, reshuffle_each_iteration=True)
        whole_groups = sizes[class_id] - sizes[class_id] % examples_per_class_per_batch
        if whole_groups:
            # A batch takes its examples of a class as the next group of
            # examples_per_class_per_batch; a pass that is a whole number of
            # groups keeps each group within one pass, hence distinct.
            stream = stream.take(whole_groups)
        streams.append(stream.repeat())
    choices = (
        tf.data.Dataset.counter()
        .map(_class_draw(len(classes), classes_per_batch, examples_per_class_per_batch, seeds[-1]))
        .unbatch()
    )
    out = tf.data.Dataset.choose_from_datasets(streams, choices)
    if load_fn is not None:
        out = out.map(load_fn, num_parallel_calls=tf.data.AUTOTUNE)
    if augmenter is not None:
        augmented = out.skip(warmup).map(augmenter, num_parallel_calls=tf.data.AUTOTUNE)
        out = out.take(warmup).concatenate(augmented) if warmup else augmented
    batch_size = classes_per_batch * examples_per_class_per_batch
    return out.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def _label_reader(spec: Any, label_output: int | str | None, owner: str) -> Callable[..., Any]:
    """Returns `(*element) -> int64 scalar class id`, after checking `spec` allows it."""
    if not isinstance(spec, tuple) or len(spec) < 2:
        raise ValueError(
            f"{owner}: ds's elements must be tuples (x, y, ...). Received elements of spec {spec}."
        )
    label_spec = spec[1]
    if label_output is not None:
        try:
            label_spec = label_spec[label_output]
        except (KeyError, IndexError, TypeError) as error:
            raise ValueError(
                f"{owner}: label_output={label_output!r} does not locate the class id in y, "
                f"whose spec is {spec[1]}. Use an index for a tuple y, a key for a dict y, or "
                "None when y is the class id."
            ) from error
    if not isinstance(label_spec, tf.TensorSpec) or label_spec.shape.num_elements() != 1:
        raise ValueError(
            f"{owner}: each example's class id must be a scalar (or shape [1]) tensor. "
            f"Received spec {label_spec}."
        )
    if not label_spec.dtype.is_integer:
        raise TypeError(
            f"{owner}: class ids must be integers. Received dtype {label_spec.dtype.name}; "
            "map class names to integers, or cast whole-number labels with tf.cast."
        )

    def label_of(*element: Any) -> tf.Tensor:
        y = element[1] if label_output is None else element[1][label_output]
        return tf.reshape(tf.cast(y, tf.int64), [])

    return label_of


def _is_class(label_of: Callable[..., Any], class_id: int) -> Callable[..., Any]:
    def is_class(*element: Any) -> tf.Tensor:
        return tf.equal(label_of(*element), class_id)

    return is_class


def _class_draw(num_classes: int, classes_per_batch: int, repeats: int, seed: int) -> Callable:
    """Returns `batch index -> stream ids`: distinct classes, each repeated, for one batch."""

    def draw(index: tf.Tensor) -> tf.Tensor:
        pair = tf.stack([tf.constant(seed, tf.int64), index])
        keys = tf.random.stateless_uniform([num_classes], seed=pair)
        chosen = tf.argsort(keys)[:classes_per_batch]
        return tf.repeat(tf.cast(chosen, tf.int64), repeats)

    return draw
