"""select_examples: class and count restrictions without replacement, seeds, errors."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.samplers import select_examples
from tests.samplers.balance import labelled_set

COUNTS = {0: 9, 1: 3, 2: 8, 3: 5}


@pytest.mark.parametrize("class_list", [None, [], [2, 0, 2]])
@pytest.mark.parametrize("limit", [None, 4])
def test_keeps_at_most_limit_distinct_examples_of_each_listed_class(class_list, limit):
    x, y = labelled_set(COUNTS)
    xs, ys = select_examples(x, y, class_list, limit, seed=0)
    wanted = set(COUNTS) if not class_list else set(class_list)
    counts = {}
    for row, label in zip(xs, ys, strict=True):
        assert int(row[1]) == int(label)
        counts.setdefault(int(label), set()).add(int(row[0]))
    assert set(counts) == wanted
    for c in wanted:
        expected = COUNTS[c] if limit is None else min(COUNTS[c], limit)
        assert len(counts[c]) == expected
    assert len(xs) == sum(len(ids) for ids in counts.values())  # no example twice


def test_seed_reproduces_the_selection_and_shuffles():
    x, y = labelled_set(COUNTS)
    a = select_examples(x, y, num_examples_per_class=3, seed=5)
    b = select_examples(x, y, num_examples_per_class=3, seed=5)
    c = select_examples(x, y, num_examples_per_class=3, seed=6)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], c[0])
    whole = select_examples(x, y, seed=1)[0][:, 0]
    assert sorted(whole.tolist()) == list(range(len(x)))
    assert whole.tolist() != sorted(whole.tolist())


def test_labels_keep_their_shape_and_dtype():
    x, y = labelled_set(COUNTS)
    _, ys = select_examples(x, y[:, None].astype(np.int16), seed=0)
    assert ys.shape == (len(y), 1) and ys.dtype == np.int16


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"y": np.zeros(3, np.int32)}, ValueError, "same length"),
        ({"y": np.linspace(0, 1, 25)}, TypeError, "integer"),
        ({"class_list": [0, 7]}, ValueError, r"\[7\]"),
        ({"class_list": [0.5]}, TypeError, "class_list"),
        ({"num_examples_per_class": 0}, ValueError, "num_examples_per_class"),
        ({"seed": "a"}, ValueError, "seed"),
    ],
)
def test_bad_input_is_refused(kwargs, error, match):
    x, y = labelled_set(COUNTS)
    arguments = {"x": x, "y": y, **kwargs}
    with pytest.raises(error, match=match):
        select_examples(**arguments)
