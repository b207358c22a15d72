"""The offline linear probe: a linear classifier on a frozen backbone's features.

`linear_probe` embeds images once with the backbone in inference mode and
calls `linear_probe_on_features`, which runs the protocol below and returns a
`LinearProbeResult`. Its two steps, `fit_linear_classifier` and
`top_k_accuracy` (in `evaluators.linear_classifier`, shared with the online
probe, `callbacks.OnlineLinearProbe`), are importable from here too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np

from tensorflow_similarity._validation import check_int, check_number, is_real
from tensorflow_similarity.evaluators.features import embed_inputs
from tensorflow_similarity.evaluators.linear_classifier import (
    class_indices,
    fit_linear_classifier,
    standardise,
    stratified_split,
    top_k_accuracy,
)

DEFAULT_LEARNING_RATES = (0.003, 0.01, 0.03, 0.1, 0.3)


@dataclasses.dataclass(frozen=True)
class LinearProbeResult:
    """What `linear_probe` measured.

    Attributes:
        top1_accuracy: Fraction of test examples whose highest-scoring class is
            their label.
        top_k_accuracy: Fraction whose label is among the `top_k`
            highest-scoring classes.
        top_k: The `k` of `top_k_accuracy` (`5` unless asked otherwise).
        learning_rate: The learning rate chosen on the held-out part of the
            training split, with which the final classifier was trained.
        validation_accuracy: Top-1 accuracy on the held-out part for each
            learning rate of the grid (`0.0` for a run that diverged).
        num_classes: Number of classes in the training labels.
    """

    top1_accuracy: float
    top_k_accuracy: float
    top_k: int
    learning_rate: float
    validation_accuracy: dict[float, float]
    num_classes: int


def linear_probe(
    backbone: keras.Model | Callable[[Any], Any],
    train_images: Any,
    train_labels: Any,
    test_images: Any,
    test_labels: Any,
    *,
    batch_size: int = 256,
    **protocol: Any,
) -> LinearProbeResult:
    """Linear-probe accuracy of a trained backbone: top-1 and top-k on a test split.

    The linear evaluation of SimCLR, BYOL and the self-supervised libraries
    (lightly, solo-learn): the backbone is frozen, its features are computed
    once (a Keras model runs with `predict`, so batch norm is in inference
    mode and uses its moving statistics), and a linear classifier is trained
    on them; see `linear_probe_on_features` for the protocol and
    `**protocol`'s arguments. Moving statistics after a short run still hold
    much of their initial values, so recompute them from the training images
    first, as the package's jobs do
    (`layers.recompute_batch_norm_statistics(backbone, train_images)`, or the
    `callbacks.BatchNormStatistics` callback during `fit`).

    Args:
        backbone: The network to evaluate: a Keras model, or any callable
            mapping a batch of inputs to a batch of features (called as is).
            Outputs of more than two dimensions are flattened per example.
        train_images: Training inputs (an array or tensor), without
            augmentation.
        train_labels: `[num_train]` integer class labels.
        test_images: Test inputs.
        test_labels: `[num_test]` integer class labels. Used only to score the
            final classifier.
        batch_size: Inputs per forward pass of the backbone. Defaults to `256`.
        **protocol: Keyword arguments of `linear_probe_on_features`
            (`learning_rates`, `epochs`, `classifier_batch_size`, `momentum`,
            `weight_decay`, `validation_fraction`, `top_k`, `seed`).

    Returns:
        A `LinearProbeResult`.

    Raises:
        ValueError: For a backbone that is not callable, inputs and labels of
            different lengths, labels that are not 1-D integers, fewer than two
            training classes, `top_k` larger than the number of classes, or a
            protocol argument out of range; all raised before the backbone
            runs. Also if the backbone does not return one `[batch, ...]`
            tensor per batch.

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from tensorflow_similarity.evaluators import linear_probe
    >>> keras.utils.set_random_seed(0)  # The backbone's weights, whatever ran before.
    >>> rng = np.random.default_rng(0)
    >>> labels = np.arange(60) % 3
    >>> images = rng.normal(size=(60, 4)) + 4 * np.eye(3, 4)[labels]
    >>> backbone = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8)])
    >>> result = linear_probe(backbone, images[:40], labels[:40], images[40:],
    ...                       labels[40:], epochs=20, top_k=2)
    >>> result.top1_accuracy
    1.0
    """
    if not callable(backbone):
        raise ValueError(
            f"linear_probe: backbone must be a Keras model or a callable. Received: {backbone!r}."
        )
    check_int("batch_size", batch_size, minimum=1, owner="linear_probe")
    train_y = _as_labels("train_labels", train_labels, _length("train_images", train_images))
    test_y = _as_labels("test_labels", test_labels, _length("test_images", test_images))
    _check_protocol(train_y, **protocol)
    train_features = _features(backbone, train_images, batch_size)
    test_features = _features(backbone, test_images, batch_size)
    return linear_probe_on_features(train_features, train_y, test_features, test_y, **protocol)


def linear_probe_on_features(
    train_features: Any,
    train_labels: Any,
    test_features: Any,
    test_labels: Any,
    *,
    learning_rates: Sequence[float] = DEFAULT_LEARNING_RATES,
    epochs: int = 100,
    classifier_batch_size: int = 256,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    validation_fraction: float = 0.2,
    top_k: int = 5,
    seed: int = 0,
) -> LinearProbeResult:
    """Trains a linear classifier on frozen features and scores it on the test split.

    The protocol, fixed so that figures can be compared across runs:

    1. Classes are the distinct training labels. A stratified, seeded
       `validation_fraction` of each class's training examples is held out.
    2. Features are standardised (zero mean, unit variance per dimension;
       constant dimensions are only centred) with the statistics of the part
       the classifier is trained on, never of the part it is scored on. The
       statistics are taken on each dimension divided by its largest
       magnitude, so features of any scale (1e300 as 1) standardise alike.
    3. For each learning rate of the grid, a softmax regression
       (`logits = features @ kernel + bias`, zero-initialised, mean
       cross-entropy plus `weight_decay / 2 * ||kernel||^2`) is trained on the
       rest of the training split: `epochs` epochs of momentum SGD in seeded,
       shuffled mini-batches of `classifier_batch_size`, the learning rate
       decayed to 0 by a cosine over all steps. The learning rate with the best
       top-1 accuracy on the held-out part wins (the smallest on a tie).
    4. The classifier is trained again with it on the whole training split
       (standardised with the whole split's statistics) and scored on the test
       split: top-1 and top-`top_k` accuracy. Test labels that are not
       training classes count as errors.

    The test split is used only in step 4, so nothing about it can change the
    learning rate chosen. The same seed gives the same result.

    Args:
        train_features: `[num_train, ...]` training features (flattened per
            example).
        train_labels: `[num_train]` integer class labels.
        test_features: `[num_test, ...]` test features.
        test_labels: `[num_test]` integer class labels.
        learning_rates: The grid searched, positive numbers. Defaults to
            `(0.003, 0.01, 0.03, 0.1, 0.3)`.
        epochs: Passes over the training features per fit. Defaults to `100`.
        classifier_batch_size: Examples per SGD step. Defaults to `256`.
        momentum: SGD momentum, in `[0, 1)`. Defaults to `0.9`.
        weight_decay: L2 penalty on the kernel, non-negative. Defaults to
            `0.0`, as in BYOL's and SimCLR's linear evaluations.
        validation_fraction: Fraction of each class held out for the search,
            in `(0, 1)`. Defaults to `0.2`.
        top_k: The `k` of the second accuracy, at most the number of classes.
            Defaults to `5`.
        seed: Seed of the split and of the shuffling. Defaults to `0`.

    Returns:
        A `LinearProbeResult`.

    Raises:
        ValueError: For features that are not at least 2-D with one row per
            label, train and test features of different dimensions, labels that
            are not 1-D integers, fewer than two training classes, `top_k`
            larger than the number of classes, an argument out of range, a
            training split too small to hold out a part of at least two
            classes' examples, or a scored feature so far from the training
            features that, standardised, it exceeds float32's range.

    Example:

    >>> import numpy as np
    >>> from tensorflow_similarity.evaluators import linear_probe_on_features
    >>> labels = np.arange(40) % 4
    >>> features = np.eye(4)[labels] + 0.1
    >>> result = linear_probe_on_features(features[:30], labels[:30], features[30:],
    ...                                   labels[30:], epochs=10, top_k=2)
    >>> result.top1_accuracy, result.top_k
    (1.0, 2)
    """
    train_x = _as_features("train_features", train_features)
    test_x = _as_features("test_features", test_features)
    train_y = _as_labels("train_labels", train_labels, len(train_x))
    test_y = _as_labels("test_labels", test_labels, len(test_x))
    if train_x.shape[1] != test_x.shape[1]:
        raise ValueError(
            "linear_probe: train and test features must have the same dimension. Received: "
            f"{train_x.shape[1]} and {test_x.shape[1]}."
        )
    protocol = dict(
        learning_rates=learning_rates,
        epochs=epochs,
        classifier_batch_size=classifier_batch_size,
        momentum=momentum,
        weight_decay=weight_decay,
        validation_fraction=validation_fraction,
        top_k=top_k,
        seed=seed,
    )
    _check_protocol(train_y, **protocol)
    classes, train_classes = np.unique(train_y, return_inverse=True)
    num_classes = len(classes)
    test_classes = class_indices(classes, test_y)
    fit_part, held_out = stratified_split(train_classes, validation_fraction, seed)
    training = dict(
        num_classes=num_classes,
        epochs=epochs,
        batch_size=classifier_batch_size,
        momentum=momentum,
        weight_decay=weight_decay,
        seed=seed,
    )

    validation_accuracy = {}
    fit_x, held_x = standardise(train_x[fit_part], train_x[held_out])
    for learning_rate in sorted(float(rate) for rate in learning_rates):
        kernel, bias = fit_linear_classifier(
            fit_x, train_classes[fit_part], learning_rate=learning_rate, **training
        )
        validation_accuracy[learning_rate] = top_k_accuracy(
            held_x, train_classes[held_out], kernel, bias, k=1
        )
    best = max(validation_accuracy, key=lambda rate: (validation_accuracy[rate], -rate))

    whole_x, scored_x = standardise(train_x, test_x)
    kernel, bias = fit_linear_classifier(whole_x, train_classes, learning_rate=best, **training)
    return LinearProbeResult(
        top1_accuracy=top_k_accuracy(scored_x, test_classes, kernel, bias, k=1),
        top_k_accuracy=top_k_accuracy(scored_x, test_classes, kernel, bias, k=top_k),
        top_k=int(top_k),
        learning_rate=best,
        validation_accuracy=validation_accuracy,
        num_classes=num_classes,
    )


def _check_protocol(
    train_labels: np.ndarray,
    learning_rates: Sequence[float] = DEFAULT_LEARNING_RATES,
    epochs: int = 100,
    classifier_batch_size: int = 256,
    momentum: float = 0.9,
    weight_decay: float = 0.0,
    validation_fraction: float = 0.2,
    top_k: int = 5,
    seed: int = 0,
) -> None:
    owner = "linear_probe"
    if (
        isinstance(learning_rates, (str, bytes))
        or not isinstance(learning_rates, Sequence)
        or not learning_rates
        or not all(is_real(rate) and rate > 0 and math.isfinite(rate) for rate in learning_rates)
    ):
        raise ValueError(
            f"{owner}: learning_rates must be a non-empty sequence of positive numbers. "
            f"Received: learning_rates={learning_rates!r}."
        )
    check_int("epochs", epochs, minimum=1, owner=owner)
    check_int("classifier_batch_size", classifier_batch_size, minimum=1, owner=owner)
    check_int("seed", seed, minimum=0, owner=owner)
    check_int("top_k", top_k, minimum=1, owner=owner)
    check_number("weight_decay", weight_decay, low=0.0, owner=owner)
    if not is_real(momentum) or not 0 <= momentum < 1:
        raise ValueError(
            f"{owner}: momentum must be a number in [0, 1). Received: momentum={momentum!r}."
        )
    if not is_real(validation_fraction) or not 0 < validation_fraction < 1:
        raise ValueError(
            f"{owner}: validation_fraction must be a number in (0, 1). "
            f"Received: validation_fraction={validation_fraction!r}."
        )
    num_classes = len(np.unique(train_labels))
    if num_classes < 2:
        raise ValueError(
            f"{owner}: the training labels hold {num_classes} class(es); a linear probe needs "
            "at least 2."
        )
    if top_k > num_classes:
        raise ValueError(
            f"{owner}: top_k={top_k} exceeds the {num_classes} training classes, so top-{top_k} "
            f"accuracy would always be 1. Pass top_k={num_classes} or less."
        )


def _features(backbone: Any, images: Any, batch_size: int) -> np.ndarray:
    return embed_inputs(backbone, images, batch_size, "linear_probe")


def _length(name: str, value: Any) -> int:
    shape = getattr(value, "shape", None)
    if shape is None or len(shape) == 0:
        raise ValueError(
            f"linear_probe: {name} must be an array or tensor with one row per example. "
            f"Received: {type(value).__name__}."
        )
    if shape[0] == 0:
        raise ValueError(f"linear_probe: {name} is empty.")
    return int(shape[0])


def _as_features(name: str, value: Any) -> np.ndarray:
    array = np.asarray(keras.ops.convert_to_numpy(value))
    if array.ndim < 2 or len(array) == 0:
        raise ValueError(
            f"linear_probe: {name} must be a non-empty array [num_examples, ...]. "
            f"Received shape {array.shape}."
        )
    if not np.issubdtype(array.dtype, np.number) or not np.all(np.isfinite(array)):
        raise ValueError(f"linear_probe: {name} must hold finite numbers.")
    return array.reshape(len(array), -1).astype(np.float64)


def _as_labels(name: str, value: Any, expected: int) -> np.ndarray:
    array = np.asarray(keras.ops.convert_to_numpy(value))
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"linear_probe: {name} must be a 1-D array of integer class labels. "
            f"Received shape {array.shape} and dtype {array.dtype}."
        )
    if len(array) != expected:
        raise ValueError(
            f"linear_probe: {name} has {len(array)} labels for {expected} examples; they must "
            "have the same length."
        )
    return array
