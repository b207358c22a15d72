"""EvalCallback: per-epoch metrics in the logs, equal to loops over the final model's embeddings."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.callbacks import EvalCallback
from tensorflow_similarity.models import SimilarityModel
from tensorflow_similarity.retrieval_metrics import RecallAtK


def _data(seed, n, classes=4):
    centres = np.random.default_rng(11).normal(size=(classes, 6)) * 2
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    return (centres[y] + rng.normal(size=(n, 6))).astype(np.float32), y


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    model = SimilarityModel(inputs, keras.layers.Dense(3)(inputs))
    model.compile("sgd", "mse", distance="l2")
    return model


def _loop_metrics(queries, labels, keys, key_labels, k):
    """Nearest-label accuracy and recall@k, by loops over float64 distances."""
    hits1, hitsk = [], []
    for q, label in zip(queries.astype(np.float64), labels, strict=True):
        distances = [np.sqrt(np.sum((q - key) ** 2)) for key in keys.astype(np.float64)]
        order = np.argsort(distances, kind="stable")
        hits1.append(key_labels[order[0]] == label)
        hitsk.append(label in key_labels[order[:k]])
    return np.mean(hits1), np.mean(hitsk)


def test_logs_known_and_unknown_class_metrics_each_epoch(tmp_path):
    model = _model()
    x, y = _data(0, 64)
    model.index(x[:10], y[:10], verbose=0)
    queries, query_labels = _data(1, 30)
    targets, target_labels = _data(2, 40)
    callback = EvalCallback(
        queries,
        query_labels,
        targets,
        target_labels,
        distance="l2",
        metrics=["binary_accuracy"],
        known_classes=[0, 1],
        retrieval_metrics=[RecallAtK(k=1), RecallAtK(k=3)],
        tb_logdir=str(tmp_path),
    )
    history = model.fit(x, np.zeros((64, 3)), epochs=2, batch_size=16, callbacks=[callback])
    names = {
        f"{metric}_{split}_classes"
        for metric in ("binary_accuracy", "recall@1", "recall@3")
        for split in ("known", "unknown")
    }
    assert names <= set(history.history)
    assert all(len(history.history[name]) == 2 for name in names)
    keys = model.predict(targets, verbose=0)
    known = np.isin(query_labels, [0, 1])
    for split, mask in (("known", known), ("unknown", ~known)):
        accuracy, recall3 = _loop_metrics(
            model.predict(queries[mask], verbose=0), query_labels[mask], keys, target_labels, 3
        )
        assert history.history[f"binary_accuracy_{split}_classes"][-1] == pytest.approx(accuracy)
        assert history.history[f"recall@1_{split}_classes"][-1] == pytest.approx(accuracy)
        assert history.history[f"recall@3_{split}_classes"][-1] == pytest.approx(recall3)
    # The model's own index is not the callback's.
    assert model.index_size() == 10

    events = list((tmp_path / "index").glob("events.out.tfevents.*"))
    assert events
    tags = {
        value.tag
        for event in tf.compat.v1.train.summary_iterator(str(events[0]))
        for value in event.summary.value
    }
    assert names <= tags


def test_without_split_the_names_have_no_suffix():
    model = _model()
    queries, query_labels = _data(1, 12)
    targets, target_labels = _data(2, 20)
    callback = EvalCallback(
        queries, query_labels, targets, target_labels, distance="l2", metrics=["binary_accuracy"]
    )
    callback.set_model(model)
    logs = {}
    callback.on_epoch_end(0, logs)
    accuracy, _ = _loop_metrics(
        model.predict(queries, verbose=0),
        query_labels,
        model.predict(targets, verbose=0),
        target_labels,
        1,
    )
    assert logs == {"binary_accuracy": pytest.approx(accuracy)}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"query_labels": [0, 1]}, "query_labels has shape"),
        ({"known_classes": [0, 1, 2, 3]}, "no query unknown classes"),
        ({"retrieval_metrics": ["recall@1"]}, "not a RetrievalMetric"),
    ],
)
def test_bad_arguments(kwargs, message):
    queries, query_labels = _data(1, 12)
    targets, target_labels = _data(2, 20)
    arguments = {
        "queries": queries,
        "query_labels": query_labels,
        "targets": targets,
        "target_labels": target_labels,
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        EvalCallback(**arguments)
