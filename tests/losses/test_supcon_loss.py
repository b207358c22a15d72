"""SupConLoss against a float64 NumPy loop."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.losses import SupConLoss
from tests.losses import metric_reference
from tests.losses.metric_fixtures import LABELS, embeddings


@pytest.mark.parametrize("temperature", [0.07, 0.5, 1.0])
def test_matches_reference(temperature):
    x = 3.0 * embeddings(seed=7)
    loss = SupConLoss(temperature=temperature, reduction="none", dtype="float64")

    terms = loss(LABELS, x).numpy()

    np.testing.assert_allclose(
        terms, metric_reference.supcon_terms(LABELS, x, temperature), rtol=1e-9, atol=1e-12
    )
    assert terms[8] == 0.0


def test_default_temperature_and_its_check():
    assert SupConLoss().temperature == 0.07
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        SupConLoss(temperature=0)
