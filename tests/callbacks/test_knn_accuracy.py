"""knn_accuracy against a NumPy implementation, and the KNNAccuracy callback inside model.fit."""

from __future__ import annotations

import importlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from tensorflow_similarity.callbacks import KNNAccuracy, knn_accuracy
from tensorflow_similarity.testing import mirrored_strategy

# The package re-exports the function under the module's name.
knn_module = importlib.import_module("tensorflow_similarity.callbacks.knn_accuracy")


def numpy_knn_accuracy(train, train_labels, test, test_labels, k, temperature):
    """Per-query loop: top-k cosine neighbours, exp(sim / T) votes, smallest label on ties."""
    train = train / np.linalg.norm(train, axis=1, keepdims=True)
    test = test / np.linalg.norm(test, axis=1, keepdims=True)
    correct = 0
    for query, label in zip(test, test_labels, strict=True):
        similarity = train @ query
        neighbours = np.argsort(-similarity, kind="stable")[:k]
        votes: dict[int, float] = {}
        for j in neighbours:
            votes[int(train_labels[j])] = votes.get(int(train_labels[j]), 0.0) + np.exp(
                similarity[j] / temperature
            )
        predicted = max(sorted(votes), key=lambda c: votes[c])
        correct += predicted == label
    return correct / len(test)


def clustered(num, num_classes, dim, noise, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(num_classes, dim))
    labels = rng.integers(0, num_classes, num)
    return (centres[labels] + noise * rng.normal(size=(num, dim))).astype("float32"), labels


@pytest.mark.parametrize(
    "k, temperature, noise, seed",
    [(1, 0.07, 1.0, 0), (5, 0.07, 1.0, 1), (20, 0.1, 1.5, 2), (50, 0.5, 2.0, 3), (7, 1.0, 3.0, 4)],
)
def test_matches_numpy(k, temperature, noise, seed):
    train, train_labels = clustered(120, 5, 8, noise, seed)
    test, test_labels = clustered(60, 5, 8, noise, seed + 100)
    expected = numpy_knn_accuracy(train, train_labels, test, test_labels, k, temperature)
    assert 0.0 < expected < 1.0  # neither trivial extreme
    actual = knn_accuracy(train, train_labels, test, test_labels, k=k, temperature=temperature)
    assert actual == pytest.approx(expected, abs=1e-12)


def test_chunked_queries_give_the_same_result(monkeypatch):
    train, train_labels = clustered(50, 4, 6, 2.0, 0)
    test, test_labels = clustered(23, 4, 6, 2.0, 1)
    whole = knn_accuracy(train, train_labels, test, test_labels, k=9)
    monkeypatch.setattr(knn_module, "_QUERY_CHUNK", 5)
    assert knn_accuracy(train, train_labels, test, test_labels, k=9) == whole


def test_weights_decide_between_classes():
    # One close neighbour of class 1 against two farther ones of class 0: a low
    # temperature lets the close one win, a high one lets the majority win.
    train = np.array([[1.0, 0.0], [0.6, 0.8], [0.6, -0.8]])
    labels = np.array([1, 0, 0])
    query, label = np.array([[1.0, 0.0]]), np.array([1])
    assert knn_accuracy(train, labels, query, label, k=3, temperature=0.1) == 1.0
    assert knn_accuracy(train, labels, query, label, k=3, temperature=10.0) == 0.0


def test_ties_go_to_the_smallest_label_and_unseen_labels_are_wrong():
    train = np.array([[1.0, 0.0], [1.0, 0.0]])
    query = np.array([[2.0, 0.0]])
    assert knn_accuracy(train, [7, 3], query, [3], k=2) == 1.0
    assert knn_accuracy(train, [7, 3], query, [7], k=2) == 0.0
    assert knn_accuracy(train, [7, 3], query, [5], k=2) == 0.0


def test_accepts_tensors_and_column_labels():
    train, train_labels = clustered(30, 3, 4, 1.0, 0)
    expected = knn_accuracy(train, train_labels, train, train_labels, k=3)
    actual = knn_accuracy(
        tf.constant(train), tf.constant(train_labels[:, None]), train, train_labels, k=3
    )
    assert actual == expected


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(train_labels=np.zeros(9, int)), "same length"),
        (dict(test_labels=np.zeros(4, int)), "same length"),
        (dict(test_embeddings=np.ones((5, 3))), "same dimension"),
        (dict(train_embeddings=np.ones(10)), "2-D"),
        (dict(test_embeddings=np.ones((0, 4))), "non-empty"),
        (dict(train_labels=np.zeros(10)), "integer"),
        (dict(k=0), "positive integer"),
        (dict(k=2.0), "positive integer"),
        (dict(k=11), "larger than the memory"),
        (dict(temperature=0.0), "temperature"),
    ],
)
def test_bad_inputs_are_rejected(kwargs, message):
    arguments = dict(
        train_embeddings=np.ones((10, 4)),
        train_labels=np.zeros(10, int),
        test_embeddings=np.ones((5, 4)),
        test_labels=np.zeros(5, int),
        k=2,
    )
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        knn_accuracy(**arguments)


class Recorder(keras.callbacks.Callback):
    """Runs after KNNAccuracy: records the log value and a NumPy reference at the same weights."""

    def __init__(self, embed, train, test, k, temperature):
        super().__init__()
        self.embed, self.train, self.test = embed, train, test
        self.k, self.temperature = k, temperature
        self.logged, self.expected = [], []

    def on_epoch_end(self, epoch, logs=None):
        self.logged.append(logs["knn_accuracy"])
        train_embeddings = self.embed(self.model)(self.train[0]).numpy()
        test_embeddings = self.embed(self.model)(self.test[0]).numpy()
        self.expected.append(
            numpy_knn_accuracy(
                train_embeddings,
                self.train[1],
                test_embeddings,
                self.test[1],
                self.k,
                self.temperature,
            )
        )


def fit_data(seed=0):
    train = clustered(64, 4, 6, 2.5, seed)
    test = clustered(32, 4, 6, 2.5, seed + 1)
    return train, test


def test_callback_logs_into_history_and_matches_numpy_each_epoch():
    keras.utils.set_random_seed(0)
    (x, y), test = fit_data()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5)])
    # A loss that moves the embeddings, so each epoch's value is different.
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    targets = np.eye(5, dtype="float32")[(y + 1) % 4]
    knn = KNNAccuracy((x, y), test, k=5, temperature=0.1, batch_size=16)
    recorder = Recorder(lambda m: m, (x, y), test, 5, 0.1)
    history = model.fit(x, targets, epochs=3, batch_size=16, verbose=0, callbacks=[knn, recorder])
    assert history.history["knn_accuracy"] == recorder.logged
    assert recorder.logged == pytest.approx(recorder.expected, abs=1e-12)
    assert len(set(recorder.logged)) > 1


def test_callback_under_mirrored_strategy_matches_numpy():
    (x, y), test = fit_data(seed=5)
    with mirrored_strategy(2).scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    knn = KNNAccuracy((x, y), test, k=5, batch_size=16)
    recorder = Recorder(lambda m: m, (x, y), test, 5, 0.07)
    history = model.fit(
        x,
        np.eye(4, dtype="float32")[y],
        epochs=1,
        batch_size=16,
        verbose=0,
        callbacks=[knn, recorder],
    )
    assert history.history["knn_accuracy"] == pytest.approx(recorder.expected, abs=1e-12)


class WithBackbone(keras.Model):
    def __init__(self):
        super().__init__()
        self.backbone = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
        self.head = keras.layers.Dense(1)

    def call(self, x):
        return self.head(self.backbone(x))


def test_callback_uses_the_backbone_and_tf_data_sets():
    keras.utils.set_random_seed(1)
    (x, y), (x_test, y_test) = fit_data(seed=3)
    model = WithBackbone()
    model.compile(optimizer="sgd", loss="mse")
    test_set = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(10)
    knn = KNNAccuracy(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(16), test_set, k=4, every_n_epochs=2
    )
    recorder = []

    class Check(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            backbone = self.model.backbone
            recorder.append(
                numpy_knn_accuracy(
                    backbone(x).numpy(), y, backbone(x_test).numpy(), y_test, 4, 0.07
                )
            )

    history = model.fit(x, y, epochs=4, verbose=0, callbacks=[knn, Check()])
    # every_n_epochs=2: logged after epochs 2 and 4 only.
    assert history.history["knn_accuracy"] == pytest.approx(recorder[1::2], abs=1e-12)


def test_callback_value_is_on_the_progress_bar(capsys):
    (x, y), test = fit_data()
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    embed = lambda batch: tf.concat([batch, batch], axis=1)  # fixed embedding
    knn = KNNAccuracy((x, y), test, k=3, embedding_fn=embed, name="knn_top1")
    model.fit(x, np.zeros((64, 2)), epochs=1, verbose=2, callbacks=[knn])
    expected = numpy_knn_accuracy(x, y, test[0], test[1], 3, 0.07)
    assert f"knn_top1: {expected:.4f}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(train_data=(np.ones((5, 2)), np.zeros(4, int))), "same number"),
        (dict(test_data=[np.ones((5, 2))]), r"tuple \(x, y\)"),
        (dict(train_data=tf.data.Dataset.range(3)), r"\(x, y\) batches"),
        (dict(k=0), "positive integer"),
        (dict(k=6), "larger than the memory"),
        (dict(temperature=-1.0), "temperature"),
        (dict(batch_size=0), "batch_size"),
        (dict(every_n_epochs=0), "every_n_epochs"),
        (dict(embedding_fn=3), "embedding_fn"),
    ],
)
def test_callback_rejects_bad_arguments(kwargs, message):
    arguments = dict(
        train_data=(np.ones((5, 2)), np.zeros(5, int)),
        test_data=(np.ones((3, 2)), np.zeros(3, int)),
        k=2,
    )
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):
        KNNAccuracy(**arguments)


def test_callback_rejects_multi_output_embeddings():
    data = (np.ones((5, 2), "float32"), np.zeros(5, int))
    knn = KNNAccuracy(data, data, k=2, embedding_fn=lambda x: (x, x))
    with pytest.raises(ValueError, match="one tensor"):
        knn.evaluate()
