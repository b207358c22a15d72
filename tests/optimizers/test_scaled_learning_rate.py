"""`scaled_learning_rate` against its formula."""

from __future__ import annotations

import math

import pytest

from tensorflow_similarity.optimizers import scaled_learning_rate


@pytest.mark.parametrize("base", [0.1, 0.3, 1.0])
@pytest.mark.parametrize("batch", [1, 64, 256, 1000, 4096])
@pytest.mark.parametrize("reference", [256, 100])
def test_formula(base, batch, reference):
    assert scaled_learning_rate(base, batch, "linear", reference) == pytest.approx(
        base * batch / reference, rel=1e-15
    )
    assert scaled_learning_rate(base, batch, rule="sqrt", reference_batch_size=reference) == (
        pytest.approx(base * math.sqrt(batch / reference), rel=1e-15)
    )


def test_defaults_are_linear_at_256():
    assert scaled_learning_rate(0.3, 4096) == pytest.approx(4.8)
    assert scaled_learning_rate(0.3, 256) == 0.3


@pytest.mark.parametrize(
    "args, message",
    [
        ((0.0, 256), "base_learning_rate"),
        ((-0.1, 256), "base_learning_rate"),
        ((float("inf"), 256), "base_learning_rate"),
        ((0.1, 0), "global_batch_size"),
        ((0.1, 2.5), "global_batch_size"),
        ((0.1, 256, "cubic"), "rule"),
        ((0.1, 256, "linear", 0), "reference_batch_size"),
    ],
)
def test_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        scaled_learning_rate(*args)
