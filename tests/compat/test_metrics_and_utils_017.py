"""0.17 calls on retrieval metrics, schedules and utils that behave as in 0.17.1."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity import utils
from tensorflow_similarity.retrieval_metrics import BNDCG, RecallAtK, RetrievalMetric
from tensorflow_similarity.schedules import WarmupCosineDecay


def test_distance_rows_other_than_the_queries_are_refused_with_0_17s_words():
    query_labels = tf.constant([1, 1, 1, 0])
    match_mask = np.array([[1, 1, 0], [1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=bool)
    two_rows = tf.constant([[0.1, 0.2, 0.3], [0.0, 0.1, 0.2]])

    for metric in (BNDCG(k=3), RecallAtK(k=3)):
        with pytest.raises(ValueError, match="Number of lookup distance rows is 2 but the number"):
            metric.compute(
                query_labels=query_labels, lookup_distances=two_rows, match_mask=match_mask
            )


class _OverridesCompute(RetrievalMetric):
    # 0.17's pattern: a subclass writes `compute` itself.
    def compute(self, *, query_labels, lookup_labels=None, lookup_distances=None, match_mask=None):
        return float(np.mean(np.asarray(match_mask)[:, : self.k]))


class _ImplementsNothing(RetrievalMetric):
    pass


def test_a_0_17_subclass_that_overrides_compute_is_instantiated_and_used():
    metric = _OverridesCompute(name="foo", canonical_name="bar", k=2)
    mask = np.array([[True, False, True], [True, True, False]])

    assert metric.name == "foo@2"
    assert metric.compute(query_labels=[1, 2], match_mask=mask) == np.mean(mask[:, :2])


def test_a_subclass_with_neither_compute_nor_per_query_says_what_to_write():
    with pytest.raises(NotImplementedError, match="_per_query"):
        _ImplementsNothing(k=1).compute(query_labels=[1], match_mask=[[True]])


def test_warmup_beyond_total_steps_raises_with_0_17s_words():
    with pytest.raises(ValueError, match="warmup_steps must be less than the total steps"):
        WarmupCosineDecay(0.1, 1000, 1000)


def test_tf_cap_memory_goes_through_tf_config_experimental(monkeypatch):
    # 0.17's tests mock tf.config.experimental's two functions; so may its users.
    calls = []
    monkeypatch.setattr(tf.config.experimental, "list_physical_devices", lambda kind: ["gpu0"])
    monkeypatch.setattr(
        tf.config.experimental, "set_memory_growth", lambda gpu, on: calls.append((gpu, on))
    )

    utils.tf_cap_memory()

    assert calls == [("gpu0", True)]


def test_tf_cap_memory_warns_with_tensorflows_error(monkeypatch):
    def refuse(gpu, on):
        raise RuntimeError("already initialised")

    monkeypatch.setattr(tf.config.experimental, "list_physical_devices", lambda kind: ["gpu0"])
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", refuse)

    with pytest.warns(UserWarning, match="gpu0: already initialised"):
        utils.tf_cap_memory()
