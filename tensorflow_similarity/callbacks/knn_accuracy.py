"""Weighted k-nearest-neighbour accuracy of embeddings, and a callback that logs it per epoch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int, check_number
from tensorflow_similarity.evaluators.features import labelled_features
from tensorflow_similarity.l2_normalize import l2_normalize

# Queries are scored in chunks so the similarity matrix stays
# `_QUERY_CHUNK x memory size` however many queries there are.
_QUERY_CHUNK = 1024


def knn_accuracy(
    train_embeddings: Any,
    train_labels: Any,
    test_embeddings: Any,
    test_labels: Any,
    k: int = 20,
    temperature: float = 0.07,
) -> float:
    """Returns the weighted k-nearest-neighbour top-1 accuracy of the test embeddings.

    The kNN evaluation of InstDisc (Wu et al., 2018) and DINO (Caron et al.,
    2021): embeddings are L2-normalised; each test embedding finds its `k`
    most cosine-similar training ("memory") embeddings, each neighbour votes
    for its label with weight `exp(similarity / temperature)`, and the label
    with the largest total weight (the smallest label on a tie) is the
    prediction. The result is the fraction of test embeddings predicted
    correctly. Test labels absent from the training labels count as errors.

    Args:
        train_embeddings: `[num_train, dim]` memory embeddings (array or tensor).
        train_labels: `[num_train]` integer labels of the memory embeddings.
        test_embeddings: `[num_test, dim]` query embeddings.
        test_labels: `[num_test]` integer labels of the queries.
        k: Number of neighbours, `1 <= k <= num_train`. Defaults to `20`
            (DINO's choice; InstDisc uses 200).
        temperature: Positive temperature of the vote weights. Defaults to
            `0.07`.

    Returns:
        The accuracy, a Python float in `[0, 1]`.

    Raises:
        ValueError: If the embeddings are not 2-D with the same dimension,
            labels are not integers, a labels array's length differs from its
            embeddings', a set is empty, `k` is not an integer in
            `[1, num_train]`, or `temperature` is not positive.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.callbacks import knn_accuracy
    >>> knn_accuracy(np.eye(3), [0, 1, 2], np.eye(3) + 0.1, [0, 1, 2], k=1)
    1.0
    """
    train_embeddings = _as_embeddings("train_embeddings", train_embeddings)
    test_embeddings = _as_embeddings("test_embeddings", test_embeddings)
    train_labels = _as_labels("train_labels", train_labels, len(train_embeddings))
    test_labels = _as_labels("test_labels", test_labels, len(test_embeddings))
    if train_embeddings.shape[1] != test_embeddings.shape[1]:
        raise ValueError(
            "train_embeddings and test_embeddings must have the same dimension. Received: "
            f"{train_embeddings.shape[1]} and {test_embeddings.shape[1]}."
        )
    _check_k(k, len(train_embeddings))
    _check_temperature(temperature)

    classes, train_classes = np.unique(train_labels, return_inverse=True)
    num_classes = len(classes)
    # Labels unseen in the memory set get -1, which no prediction equals.
    position = np.clip(np.searchsorted(classes, test_labels), 0, num_classes - 1)
    test_classes = np.where(classes[position] == test_labels, position, -1)

    memory = l2_normalize(tf.constant(train_embeddings, tf.float32), axis=1)
    memory_classes = tf.constant(train_classes.reshape(-1), tf.int32)
    correct = 0
    for start in range(0, len(test_embeddings), _QUERY_CHUNK):
        queries = l2_normalize(
            tf.constant(test_embeddings[start : start + _QUERY_CHUNK], tf.float32), axis=1
        )
        similarity = tf.matmul(queries, memory, transpose_b=True)
        top_similarity, top_index = tf.math.top_k(similarity, k=k)
        # Shifting by the row maximum leaves the argmax unchanged and keeps
        # exp() finite for small temperatures.
        weights = tf.exp((top_similarity - top_similarity[:, :1]) / temperature)
        num_queries = tf.shape(queries)[0]
        segments = (
            tf.gather(memory_classes, top_index) + num_classes * tf.range(num_queries)[:, None]
        )
        votes = tf.math.unsorted_segment_sum(
            tf.reshape(weights, [-1]), tf.reshape(segments, [-1]), num_queries * num_classes
        )
        predicted = tf.argmax(tf.reshape(votes, [num_queries, num_classes]), axis=1)
        correct += int(np.sum(predicted.numpy() == test_classes[start : start + _QUERY_CHUNK]))
    return correct / len(test_embeddings)


class KNNAccuracy(keras.callbacks.Callback):
    """Logs the weighted kNN accuracy of the model's embeddings after each epoch.

    At the end of every `every_n_epochs`-th epoch, embeds a labelled memory
    set (`train_data`) and a labelled query set (`test_data`) and writes
    `knn_accuracy(...)` (see there: cosine similarity, `k` neighbours, votes
    weighted by `exp(similarity / temperature)`) into the epoch's `logs` under
    `name`. Keras passes one `logs` dict to every callback and adds `History`
    and the progress bar after the user's callbacks, so the value appears in
    `model.fit(...).history` and on the epoch's progress-bar line; callbacks
    listed after this one (`TensorBoard`, `EarlyStopping(monitor=name)`,
    `ModelCheckpoint`) see it too, callbacks listed before it do not.

    Args:
        train_data: The memory set: a tuple `(x, y)` of arrays or tensors, or a
            `tf.data.Dataset` of `(x, y)` batches.
        test_data: The query set, in the same forms.
        k: Number of neighbours. Defaults to `20`.
        temperature: Temperature of the vote weights. Defaults to `0.07`.
        embedding_fn: What embeds the inputs: a Keras model (run with
            `predict`) or any callable mapping a batch of inputs to a batch of
            embeddings. Defaults to `None`: the trained model's `backbone`
            attribute if it has one, else the model itself. Outputs of more
            than two dimensions are flattened per example.
        batch_size: Batch size for embedding arrays. Defaults to `256`.
        every_n_epochs: Evaluate after every n-th epoch only (the key is
            missing from other epochs' logs). Defaults to `1`.
        name: The key in `logs`. Defaults to `"knn_accuracy"`.

    Raises:
        ValueError: If the data are not `(x, y)` pairs of equal length, or `k`,
            `temperature`, `batch_size` or `every_n_epochs` are out of range,
            or `k` exceeds a memory set of known size.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tensorflow_similarity.callbacks import KNNAccuracy
    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(size=(32, 4)), np.arange(32) % 4
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)])
    >>> model.compile("adam", "mse")
    >>> knn = KNNAccuracy((x[8:], y[8:]), (x[:8], y[:8]), k=4)
    >>> history = model.fit(x, rng.normal(size=(32, 8)), epochs=2, verbose=0,
    ...                     callbacks=[knn])
    >>> len(history.history["knn_accuracy"])
    2
    """

    def __init__(
        self,
        train_data: Any,
        test_data: Any,
        k: int = 20,
        temperature: float = 0.07,
        embedding_fn: keras.Model | Callable[[Any], Any] | None = None,
        batch_size: int = 256,
        every_n_epochs: int = 1,
        name: str = "knn_accuracy",
    ) -> None:
        super().__init__()
        train_size = _check_data("train_data", train_data)
        _check_data("test_data", test_data)
        _check_k(k, train_size)
        _check_temperature(temperature)
        check_int("batch_size", batch_size, minimum=1)
        check_int("every_n_epochs", every_n_epochs, minimum=1)
        if embedding_fn is not None and not callable(embedding_fn):
            raise ValueError(
                "embedding_fn must be None, a Keras model or a callable. "
                f"Received: {embedding_fn!r}"
            )
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string. Received: name={name!r}")
        self.train_data = train_data
        self.test_data = test_data
        self.k = k
        self.temperature = temperature
        self.embedding_fn = embedding_fn
        self.batch_size = batch_size
        self.every_n_epochs = every_n_epochs
        self.name = name

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if (epoch + 1) % self.every_n_epochs:
            return
        accuracy = self.evaluate()
        if logs is not None:
            logs[self.name] = accuracy

    def evaluate(self) -> float:
        """Embeds both sets with the current weights and returns the kNN accuracy."""
        embed = self._embedding_fn()
        train_embeddings, train_labels = self._embed(embed, self.train_data)
        test_embeddings, test_labels = self._embed(embed, self.test_data)
        return knn_accuracy(
            train_embeddings,
            train_labels,
            test_embeddings,
            test_labels,
            k=self.k,
            temperature=self.temperature,
        )

    def _embedding_fn(self) -> keras.Model | Callable[[Any], Any]:
        if self.embedding_fn is not None:
            return self.embedding_fn
        if self.model is None:
            raise ValueError(
                "KNNAccuracy has no model to embed with: pass embedding_fn, or use it as a "
                "callback of model.fit."
            )
        backbone = getattr(self.model, "backbone", None)
        return backbone if callable(backbone) else self.model

    def _embed(self, embed: Any, data: Any) -> tuple[np.ndarray, np.ndarray]:
        return labelled_features(embed, data, self.batch_size, "KNNAccuracy")


def _check_k(k: Any, num_train: int | None) -> None:
    check_int("k", k, minimum=1)
    if num_train is not None and k > num_train:
        raise ValueError(
            f"k={k} is larger than the memory (training) set of {num_train} embeddings. "
            "Use a smaller k or a larger memory set."
        )


def _check_temperature(temperature: Any) -> None:
    check_number("temperature", temperature, positive=True)


def _as_embeddings(name: str, value: Any) -> np.ndarray:
    array = np.asarray(keras.ops.convert_to_numpy(value))
    if array.ndim != 2 or len(array) == 0:
        raise ValueError(
            f"{name} must be a non-empty 2-D array [num_examples, dim]. "
            f"Received shape {array.shape}."
        )
    return array


def _as_labels(name: str, value: Any, expected: int) -> np.ndarray:
    array = np.asarray(keras.ops.convert_to_numpy(value))
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"{name} must be a 1-D array of integer class labels. "
            f"Received shape {array.shape} and dtype {array.dtype}."
        )
    if len(array) != expected:
        raise ValueError(
            f"{name} has {len(array)} labels but its embeddings have {expected} rows; "
            "they must have the same length."
        )
    return array


def _check_data(name: str, data: Any) -> int | None:
    if isinstance(data, tf.data.Dataset):
        spec = data.element_spec
        if not isinstance(spec, tuple) or len(spec) != 2:
            raise ValueError(
                f"{name} must be a dataset of (x, y) batches. Received element_spec {spec}."
            )
        return None
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(
            f"{name} must be a tuple (x, y) of inputs and integer labels, or a tf.data.Dataset "
            f"of (x, y) batches. Received: {type(data).__name__}."
        )
    x, y = data
    lengths = {len(a) for a in keras.tree.flatten(x)}
    if len(lengths) != 1 or lengths != {len(y)}:
        raise ValueError(
            f"{name}: x and y must have the same number of examples. Received x lengths "
            f"{sorted(lengths)} and {len(y)} labels."
        )
    if len(y) == 0:
        raise ValueError(f"{name} is empty; the kNN evaluation needs labelled examples.")
    return len(y)
