"""SingleShotMemorySampler: distinct examples per batch, the augmenter's views, seeds, errors."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.samplers import SingleShotMemorySampler


def make_x(n=12):
    return np.stack([np.arange(n), np.arange(n) * 2], axis=1).astype(np.float32)


class Views:
    """Returns `n` copies of the batch, the k-th shifted by 1000 k; records its calls."""

    def __init__(self):
        self.calls = []

    def __call__(self, x, y, num_augmentations, is_warmup):
        self.calls.append(
            (np.asarray(x).copy(), np.asarray(y).copy(), num_augmentations, is_warmup)
        )
        views = [x + 1000.0 * k for k in range(num_augmentations)]
        return tf.concat(views, 0), tf.concat([y] * num_augmentations, 0)


@pytest.mark.parametrize("examples_per_batch, views", [(4, 2), (12, 3), (1, 2)])
def test_each_batch_is_distinct_examples_and_their_views(examples_per_batch, views):
    x = make_x()
    augmenter = Views()
    sampler = SingleShotMemorySampler(
        x, augmenter, examples_per_batch, views, steps_per_epoch=20, seed=0
    )
    assert len(sampler) == 20
    for xb, yb in sampler:
        drawn_x, drawn_y, num_augmentations, _ = augmenter.calls[-1]
        assert num_augmentations == views
        assert len(set(drawn_y.tolist())) == examples_per_batch
        for row, label in zip(drawn_x, drawn_y, strict=True):
            np.testing.assert_array_equal(row, x[label])
        assert yb.dtype == tf.int32
        assert np.asarray(yb).tolist() == drawn_y.tolist() * views
        assert xb.shape == (examples_per_batch * views, 2)


def test_same_seed_same_batches_different_seed_differs():
    x = make_x(50)
    first, second, other = (SingleShotMemorySampler(x, Views(), 5, seed=s) for s in (3, 3, 4))
    for i in range(4):
        np.testing.assert_array_equal(first[i][1], second[i][1])
    assert any(not np.array_equal(first[i][1], other[i][1]) for i in range(4))


def test_warmup_flag_and_get_slice():
    augmenter = Views()
    sampler = SingleShotMemorySampler(make_x(), augmenter, 3, warmup=1, seed=0)
    sampler[0]
    sampler.on_epoch_end()
    sampler[0]
    assert [call[3] for call in augmenter.calls] == [True, False]
    xs, ys = sampler.get_slice(2, 3)
    assert np.asarray(ys).tolist() == [2, 3, 4, 2, 3, 4]
    np.testing.assert_array_equal(np.asarray(xs)[:3], make_x()[2:5])
    assert sampler.num_examples == 12 and sampler.example_shape == (2,)
    assert sampler.get_slice()[1].shape == (24,)


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((make_x(), None, 2), TypeError, "augmenter"),
        ((make_x(), Views(), 13), ValueError, "exceeds the 12"),
        ((make_x(), Views(), 0), ValueError, "examples_per_batch"),
        ((make_x(), Views(), 2, 0), ValueError, "num_augmentations_per_example"),
    ],
)
def test_bad_arguments_are_refused(args, error, match):
    with pytest.raises(error, match=match):
        SingleShotMemorySampler(*args)
