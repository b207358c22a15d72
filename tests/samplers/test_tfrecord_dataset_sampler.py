"""TFRecordDatasetSampler: shards written in tmp_path, read in class blocks as a loop says."""

from __future__ import annotations

import pytest
import tensorflow as tf

from tensorflow_similarity.samplers import TFRecordDatasetSampler

# Labels of each shard's records, in class runs of multiples of 2.
SHARDS = [[0, 0, 0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 4, 4, 5, 5, 5, 5], [6, 6]]


def _write_shards(folder, shards=SHARDS, compression=None, suffix="tfrec"):
    folder.mkdir(parents=True, exist_ok=True)
    options = tf.io.TFRecordOptions(compression_type=compression)
    for s, labels in enumerate(shards):
        with tf.io.TFRecordWriter(str(folder / f"shard_{s}.{suffix}"), options) as writer:
            for position, label in enumerate(labels):
                features = {
                    "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[s, position])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
                }
                example = tf.train.Example(features=tf.train.Features(feature=features))
                writer.write(example.SerializeToString())
    return folder


def parse(record):
    features = tf.io.parse_single_example(
        record,
        {
            "id": tf.io.FixedLenFeature([2], tf.int64),
            "label": tf.io.FixedLenFeature([], tf.int64),
        },
    )
    return features["id"], features["label"]


def interleave_reference(order, shards, cycle_length, block_length):
    """tf.data's deterministic interleave, one record at a time: slots are filled from the
    shards in `order`; each turn takes up to `block_length` records from a slot; an exhausted
    shard's slot is refilled with the next shard.

    0.17.1's TFRecordDatasetSampler gives this order too, for shards_per_cycle None, 2 and 3
    over SHARDS (3 random shard orders each), checked in its virtualenv with this module's
    helpers: `source /tmp/tfsim017/bin/activate && TF_USE_LEGACY_KERAS=1 python -c "...
    recs = _records(TFRecordDatasetSampler(folder, parse, 2, 4, shards_per_cycle=spc,
    num_repeat=1)); print(recs == interleave_reference(_first_seen_order(recs), SHARDS,
    spc or 4, 2))"` printed True nine times.
    """
    pending = [iter([(s, p, label) for p, label in enumerate(shards[s])]) for s in order]
    slots = [None] * cycle_length
    out, slot = [], 0
    while pending or any(it is not None for it in slots):
        if slots[slot] is None and pending:
            slots[slot] = pending.pop(0)
        if slots[slot] is not None:
            taken = 0
            while taken < block_length:
                record = next(slots[slot], None)
                if record is None:
                    slots[slot] = None
                    break
                out.append(record)
                taken += 1
        slot = (slot + 1) % cycle_length
    return out


def _records(dataset):
    ids, labels = [], []
    for x, y in dataset:
        ids.extend(x.numpy().tolist())
        labels.extend(y.numpy().tolist())
    return [(s, p, label) for (s, p), label in zip(ids, labels, strict=True)]


def _first_seen_order(records):
    order = []
    for s, _, _ in records:
        if s not in order:
            order.append(s)
    return order


@pytest.mark.parametrize("shards_per_cycle", [None, 2, 3])
@pytest.mark.parametrize("async_cycle", [False, True])
def test_records_come_in_class_blocks_in_interleave_order(tmp_path, shards_per_cycle, async_cycle):
    folder = _write_shards(tmp_path)
    dataset = TFRecordDatasetSampler(
        str(folder),
        parse,
        example_per_class=2,
        batch_size=4,
        shards_per_cycle=shards_per_cycle,
        async_cycle=async_cycle,
        num_repeat=1,
        seed=3,
    )

    records = _records(dataset)
    order = _first_seen_order(records)
    expected = interleave_reference(order, SHARDS, shards_per_cycle or len(SHARDS), 2)

    assert sorted(order) == [0, 1, 2, 3]
    assert records == expected
    assert len(records) == sum(len(labels) for labels in SHARDS)
    for start in range(0, len(records), 2):
        assert records[start][2] == records[start + 1][2]


def test_batches_and_repeats(tmp_path):
    folder = _write_shards(tmp_path)
    dataset = TFRecordDatasetSampler(folder, parse, 2, 6, num_repeat=2, prefetch_size=1, seed=0)

    shapes = [(x.shape, y.shape) for x, y in dataset]
    records = _records(dataset)

    assert [s[1][0] for s in shapes] == [6, 6, 6, 6, 6, 6, 4]  # 40 records, batches of 6
    assert shapes[0][0] == (6, 2)
    assert sorted(records) == sorted(interleave_reference([0, 1, 2, 3], SHARDS, 4, 2) * 2)
    infinite = TFRecordDatasetSampler(folder, parse, seed=0)
    assert infinite.cardinality() == tf.data.INFINITE_CARDINALITY
    assert next(iter(infinite))[0].shape == (32, 2)


def test_the_seed_fixes_the_shard_order(tmp_path):
    folder = _write_shards(tmp_path)

    def order(seed):
        dataset = TFRecordDatasetSampler(folder, parse, batch_size=8, num_repeat=1, seed=seed)
        return _first_seen_order(_records(dataset))

    assert order(7) == order(7)
    assert len({tuple(order(seed)) for seed in range(6)}) > 1


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_shards_with_another_suffix(tmp_path, compression):
    folder = _write_shards(tmp_path, compression=compression, suffix="tfrecord")

    dataset = TFRecordDatasetSampler(
        folder, parse, compression=compression, shard_suffix="*.tfrecord", num_repeat=1, seed=1
    )

    records = _records(dataset)
    assert records == interleave_reference(_first_seen_order(records), SHARDS, 4, 2)


def test_a_batch_size_splitting_blocks_warns(tmp_path):
    folder = _write_shards(tmp_path)
    with pytest.warns(UserWarning, match="batch_size=5 is not a multiple of example_per_class=2"):
        TFRecordDatasetSampler(folder, parse, batch_size=5)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"shard_suffix": "*.nothing"}, ValueError, "no shard matches"),
        ({"deserialization_fn": "parse"}, TypeError, "deserialization_fn must be a callable"),
        ({"compression": "LZ4"}, ValueError, "compression"),
        ({"example_per_class": 0}, ValueError, "example_per_class"),
        ({"shards_per_cycle": 0}, ValueError, "shards_per_cycle"),
        ({"parallelism": 0}, ValueError, "parallelism"),
        ({"num_repeat": -2}, ValueError, "num_repeat"),
    ],
)
def test_bad_arguments_are_refused(tmp_path, kwargs, error, match):
    folder = _write_shards(tmp_path)
    arguments = {"shard_path": folder, "deserialization_fn": parse, **kwargs}
    with pytest.raises(error, match=match):
        TFRecordDatasetSampler(**arguments)
