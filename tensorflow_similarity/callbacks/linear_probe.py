"""`OnlineLinearProbe`: a linear head trained on frozen features during `fit`, logged per epoch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tensorflow_similarity._validation import check_int, check_number
from tensorflow_similarity.evaluators.features import labelled_features
from tensorflow_similarity.evaluators.linear_classifier import (
    class_indices,
    fit_linear_classifier,
    standardise,
    top_k_accuracy,
)


class OnlineLinearProbe(keras.callbacks.Callback):
    """Trains a linear head on the backbone's frozen features and logs its accuracy per epoch.

    solo-learn's online linear probe, run from a callback: a softmax
    regression head lives beside the self-supervised model and keeps
    training as the backbone does, so its validation accuracy follows the
    representation epoch by epoch. A `ContrastiveModel`'s batches are view
    pairs, often without labels, so the labels reach the probe through its
    own labelled data: at the end of every `every_n_epochs`-th epoch it
    embeds `train_data` and `validation_data` with the backbone in inference
    mode (`predict`: batch norm uses its moving statistics, no gradient
    reaches the backbone and no variable of the model changes), standardises
    the features with the training features' statistics, trains the head
    for `head_epochs` passes of momentum SGD (the learning rate decayed from
    `learning_rate` to 0 by a cosine over those passes, the head's weights
    carried over from the previous evaluation; see
    `evaluators.linear_probe_on_features`), and writes its top-1 accuracy on
    `validation_data` into the epoch's `logs` under `name`. Unlike
    solo-learn's probe, which trains on each batch's augmented views, this
    one sees clean images once per evaluation; its figure is a monitor, and
    `evaluators.linear_probe` (with its learning-rate search) is the one to
    report.

    The head is trained with stateless random ops on its own seed and holds
    no Keras variables, so the model's training is bit-for-bit what it is
    without the probe. Put `callbacks.BatchNormStatistics` before it so it
    sees the trained network in inference mode. Labels of `validation_data`
    that are not classes of `train_data` count as errors.

    Args:
        train_data: Labelled images to train the head on: a tuple `(x, y)` of
            an array or tensor and integer labels, or a `tf.data.Dataset` of
            `(x, y)` batches. Its classes at the first evaluation are the
            head's classes.
        validation_data: Labelled images to score the head on, in the same
            forms.
        embedding_fn: What computes the features: a Keras model (run with
            `predict`) or any callable mapping a batch of inputs to a batch of
            features. Defaults to `None`: the trained model's `backbone`
            attribute if it has one, else the model itself. Outputs of more
            than two dimensions are flattened per example.
        learning_rate: Positive initial learning rate of each evaluation's
            passes. Defaults to `0.1`.
        head_epochs: Passes over `train_data`'s features per evaluation.
            Defaults to `5`.
        batch_size: Inputs per forward pass and examples per SGD step.
            Defaults to `256`.
        momentum: SGD momentum, in `[0, 1)`. Defaults to `0.9`.
        weight_decay: L2 penalty on the head's kernel. Defaults to `0.0`.
        every_n_epochs: Evaluate after every n-th epoch only (the key is
            missing from other epochs' logs). Defaults to `1`.
        seed: Non-negative seed of the head's shuffling. Defaults to `0`.
        name: The key in `logs`. Defaults to `"linear_probe_accuracy"`.

    Raises:
        ValueError: If the data are not `(x, y)` pairs of equal, non-zero
            length with integer labels of at least two classes (checked here
            for arrays, at the first evaluation for datasets), or an argument
            is out of range.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tensorflow_similarity.callbacks import OnlineLinearProbe
    >>> rng = np.random.default_rng(0)
    >>> y = np.arange(40) % 4
    >>> x = rng.normal(size=(40, 4)) + 3 * np.eye(4)[y]
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)])
    >>> model.compile("sgd", "mse")
    >>> probe = OnlineLinearProbe((x[:30], y[:30]), (x[30:], y[30:]))
    >>> history = model.fit(x, rng.normal(size=(40, 8)), epochs=2, verbose=0,
    ...                     callbacks=[probe])
    >>> len(history.history["linear_probe_accuracy"])
    2
    """

    def __init__(
        self,
        train_data: Any,
        validation_data: Any,
        embedding_fn: keras.Model | Callable[[Any], Any] | None = None,
        learning_rate: float = 0.1,
        head_epochs: int = 5,
        batch_size: int = 256,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        every_n_epochs: int = 1,
        seed: int = 0,
        name: str = "linear_probe_accuracy",
    ) -> None:
        super().__init__()
        owner = "OnlineLinearProbe"
        train_labels = _check_data("train_data", train_data)
        _check_data("validation_data", validation_data)
        if train_labels is not None:
            _check_classes(train_labels)
        if embedding_fn is not None and not callable(embedding_fn):
            raise ValueError(
                f"{owner}: embedding_fn must be None, a Keras model or a callable. "
                f"Received: {embedding_fn!r}."
            )
        check_number("learning_rate", learning_rate, positive=True, owner=owner)
        check_int("head_epochs", head_epochs, minimum=1, owner=owner)
        check_int("batch_size", batch_size, minimum=1, owner=owner)
        check_number("momentum", momentum, low=0.0, owner=owner)
        if momentum >= 1:
            raise ValueError(
                f"{owner}: momentum must be a number in [0, 1). Received: momentum={momentum!r}."
            )
        check_number("weight_decay", weight_decay, low=0.0, owner=owner)
        check_int("every_n_epochs", every_n_epochs, minimum=1, owner=owner)
        check_int("seed", seed, minimum=0, owner=owner)
        if not isinstance(name, str) or not name:
            raise ValueError(f"{owner}: name must be a non-empty string. Received: name={name!r}.")
        self.train_data = train_data
        self.validation_data = validation_data
        self.embedding_fn = embedding_fn
        self.learning_rate = learning_rate
        self.head_epochs = head_epochs
        self.batch_size = batch_size
        self.momentum = momentum
        self.weight_decay = weight_decay
        self.every_n_epochs = every_n_epochs
        self.seed = seed
        self.name = name
        self.classes: np.ndarray | None = None
        self.kernel: np.ndarray | None = None
        self.bias: np.ndarray | None = None
        self.evaluations = 0

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if (epoch + 1) % self.every_n_epochs:
            return
        accuracy = self.evaluate()
        if logs is not None:
            logs[self.name] = accuracy

    def evaluate(self) -> float:
        """Trains the head for `head_epochs` passes on the current features; returns its accuracy.

        Returns:
            The top-1 accuracy on `validation_data`, a Python float in `[0, 1]`.

        Raises:
            ValueError: If there is no network to embed with, the features'
                dimension changed since the head was made, or a dataset's
                labels are not integers of at least two classes.
        """
        embed = self._embedding_fn()
        train_x, train_y = _embed(embed, self.train_data, self.batch_size)
        val_x, val_y = _embed(embed, self.validation_data, self.batch_size)
        if self.classes is None:
            self.classes = _check_classes(train_y)
            self.kernel = np.zeros((train_x.shape[1], len(self.classes)), np.float32)
            self.bias = np.zeros(len(self.classes), np.float32)
        if train_x.shape[1] != self.kernel.shape[0]:
            raise ValueError(
                f"OnlineLinearProbe: the features have {train_x.shape[1]} dimensions, the head "
                f"was made for {self.kernel.shape[0]}. Use one embedding network throughout."
            )
        train_x, val_x = standardise(train_x, val_x)
        train_classes = class_indices(self.classes, train_y)
        known = train_classes >= 0
        self.kernel, self.bias = fit_linear_classifier(
            train_x[known],
            train_classes[known],
            num_classes=len(self.classes),
            learning_rate=self.learning_rate,
            epochs=self.head_epochs,
            batch_size=self.batch_size,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            seed=self.seed + self.evaluations,
            initial=(self.kernel, self.bias),
        )
        self.evaluations += 1
        return top_k_accuracy(
            val_x,
            class_indices(self.classes, val_y),
            self.kernel,
            self.bias,
            k=1,
        )

    def _embedding_fn(self) -> keras.Model | Callable[[Any], Any]:
        if self.embedding_fn is not None:
            return self.embedding_fn
        if self.model is None:
            raise ValueError(
                "OnlineLinearProbe has no network to embed with: pass embedding_fn, or use it "
                "as a callback of model.fit."
            )
        backbone = getattr(self.model, "backbone", None)
        return backbone if callable(backbone) else self.model


def _embed(embed: Any, data: Any, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """`(features, labels)` of `data`: features `[num, dim]` float64, labels 1-D integers."""
    features, labels = labelled_features(embed, data, batch_size, "OnlineLinearProbe")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"OnlineLinearProbe: labels must be integers. Received dtype {labels.dtype}."
        )
    return features.astype(np.float64), labels


def _check_classes(labels: np.ndarray) -> np.ndarray:
    classes = np.unique(labels)
    if len(classes) < 2:
        raise ValueError(
            f"OnlineLinearProbe: train_data holds {len(classes)} class(es); a linear probe "
            "needs at least 2."
        )
    return classes


def _check_data(name: str, data: Any) -> np.ndarray | None:
    """The labels of an `(x, y)` pair, checked; `None` for a dataset (checked when read)."""
    if isinstance(data, tf.data.Dataset):
        spec = data.element_spec
        if not isinstance(spec, tuple) or len(spec) != 2:
            raise ValueError(
                f"OnlineLinearProbe: {name} must be a dataset of (x, y) batches. "
                f"Received element_spec {spec}."
            )
        return None
    if not isinstance(data, (tuple, list)) or len(data) != 2:
        raise ValueError(
            f"OnlineLinearProbe: {name} must be a tuple (x, y) of inputs and integer labels, or "
            f"a tf.data.Dataset of (x, y) batches. Received: {type(data).__name__}."
        )
    x, y = data
    labels = np.asarray(keras.ops.convert_to_numpy(y))
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"OnlineLinearProbe: {name}'s labels must be a 1-D array of integers. "
            f"Received shape {labels.shape} and dtype {labels.dtype}."
        )
    lengths = {len(a) for a in keras.tree.flatten(x)}
    if lengths != {len(labels)}:
        raise ValueError(
            f"OnlineLinearProbe: {name}: x and y must have the same number of examples. "
            f"Received x lengths {sorted(lengths)} and {len(labels)} labels."
        )
    if len(labels) == 0:
        raise ValueError(f"OnlineLinearProbe: {name} is empty; the probe needs labelled examples.")
    return labels
