"""`TFRecordDatasetSampler`: a `tf.data` pipeline of class blocks read from TFRecord shards."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

import tensorflow as tf

from tensorflow_similarity._validation import check_bool, check_choice, check_int

_OWNER = "TFRecordDatasetSampler"


def TFRecordDatasetSampler(  # noqa: N802 (0.17's name, a function)
    shard_path: str,
    deserialization_fn: Callable,
    example_per_class: int = 2,
    batch_size: int = 32,
    shards_per_cycle: int | None = None,
    compression: str | None = None,
    parallelism: int = tf.data.AUTOTUNE,
    async_cycle: bool = False,
    prefetch_size: int | None = None,
    shard_suffix: str = "*.tfrec",
    num_repeat: int = -1,
    *,
    seed: int | None = None,
) -> tf.data.Dataset:
    """Returns a `tf.data.Dataset` of batches made of `example_per_class`-long class blocks.

    For datasets too large for memory, stored as TFRecord shards whose records
    come in contiguous runs of one class, each run a multiple of
    `example_per_class` long, e.g. with `example_per_class=2`:
    `shard_0.tfrec: [0, 0, 0, 0, 1, 1]`, `shard_1.tfrec: [2, 2, 3, 3, 3, 3]`.

    The shards matching `shard_path/shard_suffix` are shuffled, then read
    `shards_per_cycle` at a time, in turn, `example_per_class` consecutive
    records from each (`tf.data.Dataset.interleave` with
    `block_length=example_per_class`, deterministic), so every block of
    `example_per_class` records is one class. Each record goes through
    `deserialization_fn`; the stream is repeated `num_repeat` times (the
    shard order is reshuffled each time), batched by `batch_size` and
    prefetched. Batches hold `batch_size // example_per_class` blocks; a
    block's class may recur in the next block when a shard holds more than
    `example_per_class` records of it. Under a `tf.distribute` strategy the
    batch is the global batch `fit` splits over the replicas.

    Args:
        shard_path: The folder holding the shards.
        deserialization_fn: A function parsing one serialised record (a scalar
            string tensor) into an example, e.g. `(x, y)`, with `tf` ops.
        example_per_class: Number of consecutive records of one class in a
            block. Defaults to 2.
        batch_size: Number of records per batch. Defaults to 32.
        shards_per_cycle: Number of shards read in turn at a time; `None`
            for all of them. Defaults to `None`.
        compression: The shards' compression: `None`, `""`, `"ZLIB"` or
            `"GZIP"`. Defaults to `None`.
        parallelism: Number of records deserialised in parallel, or
            `tf.data.AUTOTUNE`. Defaults to `tf.data.AUTOTUNE`.
        async_cycle: Read the shards of a cycle from one thread each instead
            of a single thread (which is usually faster). Defaults to `False`.
        prefetch_size: Number of batches prefetched; `None` (or 0) for 10.
            Defaults to `None`.
        shard_suffix: Glob pattern of the shard file names. Defaults to
            `"*.tfrec"`.
        num_repeat: Number of passes over the shards; -1 repeats forever.
            Defaults to -1.
        seed: Seed of the shard shuffles (keyword only), or `None` for a
            random order. Defaults to `None`.

    Returns:
        The batched dataset, ready for `model.fit`.

    Raises:
        ValueError: If no file matches `shard_path/shard_suffix`, or an
            argument is out of range. A warning is given when `batch_size`
            is not a multiple of `example_per_class` (blocks then straddle
            batches).
        TypeError: If `deserialization_fn` is not callable.

    Example:

    Two shards of four classes each, four records per class:

    >>> import os
    >>> import tempfile
    >>> import tensorflow as tf
    >>> from tensorflow_similarity.samplers import TFRecordDatasetSampler
    >>> def serialise(x, y):
    ...     feature = {"x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
    ...                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[y]))}
    ...     return tf.train.Example(features=tf.train.Features(feature=feature))
    >>> shards = tempfile.mkdtemp()
    >>> for shard in range(2):
    ...     with tf.io.TFRecordWriter(os.path.join(shards, f"shard_{shard}.tfrec")) as writer:
    ...         for y in range(4 * shard, 4 * shard + 4):
    ...             for _ in range(4):
    ...                 writer.write(serialise([y] * 4, y).SerializeToString())
    >>> def parse(record):
    ...     features = tf.io.parse_single_example(record, {
    ...         "x": tf.io.FixedLenFeature([4], tf.float32),
    ...         "y": tf.io.FixedLenFeature([], tf.int64)})
    ...     return features["x"], features["y"]
    >>> dataset = TFRecordDatasetSampler(shards, parse, example_per_class=4, batch_size=8, seed=0)
    >>> x, y = next(iter(dataset))  # `model.fit(dataset, steps_per_epoch=...)` takes it as is
    >>> x.shape
    TensorShape([8, 4])
    >>> [len(set(block)) for block in y.numpy().reshape(2, 4).tolist()]  # one class per block
    [1, 1]
    """
    if not callable(deserialization_fn):
        raise TypeError(
            f"{_OWNER}: deserialization_fn must be a callable parsing one serialised record. "
            f"Received {deserialization_fn!r}."
        )
    check_int("example_per_class", example_per_class, minimum=1, owner=_OWNER)
    check_int("batch_size", batch_size, minimum=1, owner=_OWNER)
    check_int("shards_per_cycle", shards_per_cycle, minimum=1, allow_none=True, owner=_OWNER)
    check_choice("compression", compression, (None, "", "ZLIB", "GZIP"), owner=_OWNER)
    if parallelism != tf.data.AUTOTUNE:
        check_int("parallelism", parallelism, minimum=1, owner=_OWNER, hint="Or tf.data.AUTOTUNE.")
    check_bool("async_cycle", async_cycle, owner=_OWNER)
    check_int("prefetch_size", prefetch_size, minimum=0, allow_none=True, owner=_OWNER)
    check_int("num_repeat", num_repeat, minimum=-1, owner=_OWNER, hint="-1 repeats forever.")
    check_int("seed", seed, minimum=0, allow_none=True, owner=_OWNER)
    pattern = os.path.join(os.fspath(shard_path), shard_suffix)
    shards = sorted(tf.io.gfile.glob(pattern))
    if not shards:
        raise ValueError(
            f"{_OWNER}: no shard matches {pattern!r}. Check shard_path, or set shard_suffix "
            "to the shards' glob pattern (e.g. '*.tfrecord')."
        )
    if batch_size % example_per_class:
        warnings.warn(
            f"{_OWNER}: batch_size={batch_size} is not a multiple of "
            f"example_per_class={example_per_class}, so some class blocks are split between "
            "two batches.",
            stacklevel=2,
        )

    cycle_length = shards_per_cycle or len(shards)
    dataset = tf.data.Dataset.from_tensor_slices(shards).shuffle(len(shards), seed=seed)
    # Deterministic: a parallel read must not break the class blocks apart.
    dataset = dataset.interleave(
        lambda shard: tf.data.TFRecordDataset(shard, compression_type=compression),
        cycle_length=cycle_length,
        block_length=example_per_class,
        num_parallel_calls=cycle_length if async_cycle else 1,
        deterministic=True,
    )
    dataset = dataset.map(deserialization_fn, num_parallel_calls=parallelism)
    dataset = dataset.repeat(count=num_repeat)
    return dataset.batch(batch_size).prefetch(prefetch_size or 10)
