"""assert_replica_parity tests the loss it is given, never a copy with default settings."""

from __future__ import annotations

import numpy as np
import pytest

from tensorflow_similarity.losses import TripletLoss
from tensorflow_similarity.testing import assert_replica_parity


class _ForgetfulTriplet(TripletLoss):
    """A triplet loss whose get_config drops its margin, so a copy has the default."""

    def get_config(self):
        config = super().get_config()
        del config["margin"]
        return config


def test_a_loss_whose_config_drops_a_setting_is_not_tested_with_the_default():
    rng = np.random.default_rng(0)
    labels, embeddings = rng.integers(0, 3, size=8), rng.normal(size=(8, 3))
    loss = _ForgetfulTriplet(margin=0.3, dtype="float64")
    with pytest.raises(AssertionError, match=r"_ForgetfulTriplet rebuilt .* margin=None, not 0\.3"):
        assert_replica_parity(loss, labels, embeddings, replicas=(2,))
