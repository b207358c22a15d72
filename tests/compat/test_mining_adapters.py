"""0.17's masked reductions and mining (`algebra`, `losses.utils`) keep 0.17's values.

`algebra.masked_max` / `masked_min` and `losses.utils.positive_distances` /
`negative_distances` return a `[n, 1]` value in the distances' dtype and an
int64 column per row, with 0.17's conventions where a row has nothing to
pick: a masked max over an empty row gives the row's smallest distance minus
`1e-6` (column 0), a masked min its largest plus `1e-6` (column 0), and
semi-hard mining follows from those. The references below are float64 NumPy
loops written from that description. The last tests pin that these are
adapters over `losses.mining`, the package's one implementation. The last tests pin that these are
adapters over `losses.mining`, the package's one implementation.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import algebra
from tensorflow_similarity.losses import mining
from tensorflow_similarity.losses import utils as utils017

DTYPES = [np.float16, np.float32, np.float64]
SEEDS = range(12)
EMPTY_ROW_OFFSET = 1e-6


# --- References: plain loops, float64 ---------------------------------------------------------


def rounded(value: float, dtype) -> float:
    """A float64 value as the distances' dtype holds it."""
    return float(np.asarray(value, np.float64).astype(dtype))


def reference_extreme(d, mask, largest, dtype):
    """0.17's masked max (`largest`) or min over axis 1: the first extreme masked entry;
    an empty row gives its min - 1e-6 (max) or its max + 1e-6 (min), column 0."""
    values, columns = [], []
    for row, row_mask in zip(d, mask, strict=True):
        picked = [j for j in range(len(row)) if row_mask[j]]
        if not picked:
            fill = min(row) - EMPTY_ROW_OFFSET if largest else max(row) + EMPTY_ROW_OFFSET
            values.append(rounded(fill, dtype))
            columns.append(0)
            continue
        best = picked[0]
        for j in picked[1:]:
            if (row[j] > row[best]) if largest else (row[j] < row[best]):
                best = j
        values.append(row[best])
        columns.append(best)
    return np.array(values, np.float64)[:, None], np.array(columns, np.int64)


def reference_semi_hard(d, positive, negative, dtype):
    """0.17's semi-hard negative of each row.

    `p` is the row's farthest positive, or (no positive) its smallest distance
    - 1e-6 as the dtype holds it. The closest negative farther than `p`; else
    the farthest negative; else (no negative) column 0 with `d[row, 0]` if
    that is not farther than `p`, and the row's largest distance + 1e-6 if it is.
    """
    farthest_positive, _ = reference_extreme(d, positive, True, dtype)
    values, columns = [], []
    for i, row in enumerate(d):
        p = farthest_positive[i, 0]
        negatives = [j for j in range(len(row)) if negative[i, j]]
        farther = [j for j in negatives if row[j] > p]
        if farther:
            best = min(farther, key=lambda j: (row[j], j))
        elif negatives:
            best = min(negatives, key=lambda j: (-row[j], j))
        elif row[0] <= p:
            best = 0
        else:
            values.append(rounded(max(row) + EMPTY_ROW_OFFSET, dtype))
            columns.append(0)
            continue
        values.append(row[best])
        columns.append(best)
    return np.array(values, np.float64)[:, None], np.array(columns, np.int64)


# --- Inputs ------------------------------------------------------------------------------------


def case(seed: int, dtype):
    """`(distances as dtype holds them (float64), positive mask, negative mask)`.

    Seeds cycle through: label masks with queries == keys, label masks with
    more keys than queries, arbitrary (not complementary) masks with empty
    rows forced in, and the same on a coarse grid of values (ties), some of
    them negative (similarities).
    """
    rng = np.random.default_rng(seed)
    kind = seed % 4
    n = int(rng.integers(3, 8))
    m = n if kind == 0 else n + int(rng.integers(0, 6))
    if kind in (2, 3):
        d = rng.integers(-2, 9, size=(n, m)) * 0.25
    else:
        d = rng.uniform(0.0, 2.0, size=(n, m))
        d[np.arange(n), np.arange(n)] = 0.0
    d = np.asarray(d, np.float64).astype(dtype).astype(np.float64)
    if kind in (0, 1):
        labels = rng.integers(0, max(2, n // 2), size=m)
        same = labels[:n, None] == labels[None, :]
        positive = same & (np.arange(n)[:, None] != np.arange(m)[None, :])
        negative = ~same
    else:
        positive = rng.random((n, m)) < 0.4
        negative = rng.random((n, m)) < 0.4
    # Empty rows: no positive, no negative, neither.
    positive[0] = False
    negative[min(1, n - 1)] = False
    positive[n - 1] = negative[n - 1] = False
    return d, positive, negative


def no_negative_rows_on_both_sides_of_p():
    """Rows without negatives where d[row, 0] is below / above the farthest positive."""
    d = np.array([[0.5, 0.1, 0.9, 0.2], [0.8, 0.1, 0.3, 0.2], [0.3, 0.3, 0.3, 0.3]])
    positive = np.array([[0, 0, 1, 0], [0, 1, 1, 0], [0, 1, 0, 0]], bool)
    negative = np.zeros_like(positive)
    return d, positive, negative


def all_cases(dtype):
    yield from (case(seed, dtype) for seed in SEEDS)
    d, positive, negative = no_negative_rows_on_both_sides_of_p()
    yield np.asarray(d, dtype).astype(np.float64), positive, negative


def check(got, expected, dtype, rows):
    value, column = got
    expected_value, expected_column = expected
    assert value.dtype == tf.as_dtype(dtype)
    assert column.dtype == tf.int64
    assert tuple(value.shape) == (rows, 1)
    assert tuple(column.shape) == (rows,)
    np.testing.assert_array_equal(value.numpy().astype(np.float64), expected_value)
    np.testing.assert_array_equal(column.numpy(), expected_column)


# --- algebra -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("largest", [True, False], ids=["masked_max", "masked_min"])
@pytest.mark.parametrize("dim", [1, 0])
def test_algebra_masked_extremes_keep_017_values(dtype, largest, dim):
    reduce = algebra.masked_max if largest else algebra.masked_min
    for d, positive, negative in all_cases(dtype):
        for mask in (positive, negative, positive | negative):
            value, column = reduce(tf.constant(d, dtype), tf.constant(mask), dim=dim)
            if dim == 1:
                check((value, column), reference_extreme(d, mask, largest, dtype), dtype, len(d))
            else:
                # dim=0 reduces the columns: the reference on the transpose, [1, m].
                expected = reference_extreme(d.T, mask.T, largest, dtype)
                check((tf.transpose(value), column), expected, dtype, d.shape[1])


def test_algebra_defaults_to_dim_1_and_takes_0_1_masks_and_numpy():
    d, positive, _ = case(0, np.float64)
    value, column = algebra.masked_max(d, positive.astype(np.float32))
    check((value, column), reference_extreme(d, positive, True, np.float64), np.float64, len(d))
    value, column = algebra.masked_min(d.tolist(), positive.tolist())
    expected = reference_extreme(np.float32(d).astype(np.float64), positive, False, np.float32)
    check((value, column), expected, np.float32, len(d))


def test_algebra_dim_minus_one_is_dim_1():
    d, positive, _ = case(1, np.float32)
    for reduce in (algebra.masked_max, algebra.masked_min):
        last = reduce(tf.constant(d, tf.float32), positive, dim=-1)
        one = reduce(tf.constant(d, tf.float32), positive, dim=1)
        np.testing.assert_array_equal(last[0].numpy(), one[0].numpy())
        np.testing.assert_array_equal(last[1].numpy(), one[1].numpy())


# --- losses.utils ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("strategy", ["hard", "easy"])
def test_positive_distances_keep_017_values(dtype, strategy):
    for d, positive, _ in all_cases(dtype):
        got = utils017.positive_distances(strategy, tf.constant(d, dtype), tf.constant(positive))
        expected = reference_extreme(d, positive, strategy == "hard", dtype)
        check(got, expected, dtype, len(d))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("strategy", ["hard", "easy", "semi-hard"])
def test_negative_distances_keep_017_values(dtype, strategy):
    for d, positive, negative in all_cases(dtype):
        got = utils017.negative_distances(
            strategy, tf.constant(d, dtype), tf.constant(negative), tf.constant(positive)
        )
        if strategy == "semi-hard":
            expected = reference_semi_hard(d, positive, negative, dtype)
        else:
            expected = reference_extreme(d, negative, strategy == "easy", dtype)
        check(got, expected, dtype, len(d))


def test_semi_hard_edge_rows_take_017_placeholders():
    d, positive, negative = no_negative_rows_on_both_sides_of_p()
    value, column = utils017.negative_distances("semi-hard", d, negative, positive)
    # Row 0: d[0, 0] = 0.5 <= 0.9, the farthest positive: d[0, 0]. Row 1: 0.8 > 0.3:
    # the row's largest + 1e-6. Row 2: 0.3 <= 0.3: d[2, 0].
    np.testing.assert_array_equal(value.numpy()[:, 0], [0.5, 0.8 + 1e-6, 0.3])
    np.testing.assert_array_equal(column.numpy(), [0, 0, 0])


def test_semi_hard_easy_mask_selects_one_column_per_row():
    d = np.zeros((3, 5))
    mask = utils017.semi_hard_easy_mask(d, tf.constant([4, 0, 2], tf.int64))
    assert mask.dtype == tf.bool
    np.testing.assert_array_equal(mask.numpy(), np.eye(5, dtype=bool)[[4, 0, 2]])


@pytest.mark.parametrize(
    ("function", "args"),
    [
        (utils017.positive_distances, ("semi-hard", np.zeros((2, 2)), np.ones((2, 2), bool))),
        (utils017.negative_distances, ("medium", np.zeros((2, 2)), np.ones((2, 2), bool), None)),
    ],
)
def test_unknown_strategies_raise(function, args):
    with pytest.raises(ValueError, match="mining_strategy"):
        function(*args)


# --- One implementation: the adapters call `losses.mining` -------------------------------------


@pytest.fixture
def mining_calls(monkeypatch):
    """Records the calls to `mining.masked_max` (which `mining.masked_min` calls too) and
    `mining.semi_hard_negatives`, still returning what they return."""
    calls = []

    def recording(name):
        original = getattr(mining, name)

        def wrapper(*args, **kwargs):
            calls.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(mining, name, wrapper)

    recording("masked_max")
    recording("semi_hard_negatives")
    return calls


D, POSITIVE, NEGATIVE = case(2, np.float32)


@pytest.mark.parametrize(
    "call",
    [
        lambda: algebra.masked_max(D, POSITIVE),
        lambda: algebra.masked_min(D, POSITIVE),
        lambda: algebra.masked_max(D, POSITIVE, dim=0),
        lambda: algebra.masked_min(D, POSITIVE, dim=0),
        lambda: utils017.positive_distances("hard", D, POSITIVE),
        lambda: utils017.positive_distances("easy", D, POSITIVE),
        lambda: utils017.negative_distances("hard", D, NEGATIVE, POSITIVE),
        lambda: utils017.negative_distances("easy", D, NEGATIVE, POSITIVE),
    ],
    ids=["max", "min", "max-dim0", "min-dim0", "pos-hard", "pos-easy", "neg-hard", "neg-easy"],
)
def test_017_reductions_are_adapters_over_mining(mining_calls, call):
    call()
    assert "masked_max" in mining_calls


def test_017_and_the_package_mine_semi_hard_negatives_with_one_function(mining_calls):
    utils017.negative_distances("semi-hard", D, NEGATIVE, POSITIVE)
    assert mining_calls.count("semi_hard_negatives") == 1
    mining.mine_negatives(tf.constant(D), POSITIVE, NEGATIVE, "semi-hard")
    assert mining_calls.count("semi_hard_negatives") == 2


def test_algebra_reexports_the_017_reductions_of_losses_utils():
    # As in 0.17, where `losses.utils` imported them from `algebra`: one object, two paths.
    assert algebra.masked_max is utils017.masked_max
    assert algebra.masked_min is utils017.masked_min
